"""The deployment's TLS and tokens: Secrets mounted whole where the configuration looks
for them, and the cert-manager Certificate that fills the servers' Secret."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.project.test_deploy import BAKED_CONFIG, server_config, server_deployment
from tests.support.kube import DEPLOY, one, render


def test_tls_and_tokens_come_from_secrets_mounted_whole() -> None:
    """Mounted whole (the kubelet updates them in place when they rotate; a subPath mount
    never updates), read-only, at the folders the configuration names."""
    spec, c = server_deployment("base")
    config = server_config(render("base"))
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert not any("subPath" in m for m in c["volumeMounts"]), "subPath mounts never update"
    for key, secret in (("tls.cert_file", "conveyor-server-tls"),
                        ("tls.key_file", "conveyor-server-tls"),
                        ("auth.tokens_file", "conveyor-tokens")):
        section, leaf = key.split(".")
        path = Path(config[section][leaf])
        mount = mounts[str(path.parent)]
        assert mount["readOnly"] is True, key
        assert volumes[mount["name"]]["secret"]["secretName"] == secret, key
    # The keys cert-manager (and kubectl create secret tls) write.
    assert Path(config["tls"]["cert_file"]).name == "tls.crt"
    assert Path(config["tls"]["key_file"]).name == "tls.key"
    assert config["auth"]["disabled"] is False and config["reflection"] is False


def test_cert_manager_certificate_fills_the_secret_the_servers_mount() -> None:
    """deploy/cert-manager/certificate.yaml (cert-manager's CRDs: not in a kustomization,
    so checked here by structure): the Secret it writes is the one mounted, for names the
    trainers use, and the servers' files are the keys cert-manager writes."""
    docs = [d for d in yaml.safe_load_all((DEPLOY / "cert-manager" / "certificate.yaml")
                                          .read_text()) if d]
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert all(d["apiVersion"] == "cert-manager.io/v1" for d in docs)
    server = by_name[("Certificate", "conveyor-server")]["spec"]
    spec, _ = server_deployment("base")
    secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert server["secretName"] in secrets
    service = one(render("base"), "Service", "conveyor-server")["metadata"]["name"]
    assert {service, f"{service}.conveyor.svc"} <= set(server["dnsNames"])
    assert "server auth" in server["usages"]
    issuer = server["issuerRef"]["name"]
    assert ("Issuer", issuer) in by_name
    ca = by_name[("Issuer", issuer)]["spec"]["ca"]["secretName"]
    assert by_name[("Certificate", ca)]["spec"]["isCA"] is True
    mounted = {Path(BAKED_CONFIG["tls"][k]).name for k in ("cert_file", "key_file")}
    assert mounted == {"tls.crt", "tls.key"}
