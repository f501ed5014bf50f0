"""The repository as a whole: rooms and import circles, pinned dependencies, deployment
artifacts, generated code, the documentation site and the README's examples."""
