"""Certificates for the HTTPS tests, made with openssl: a CA, a server certificate it signs for
127.0.0.1 (and boot.example), and the ways a certificate can be wrong."""
import subprocess
from pathlib import Path


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class Certificates:
    """In `directory`: ca.pem/ca.key (the CA), server.pem/server.key (RSA 2048, signed by the CA,
    SAN `server_names`, by default IP:127.0.0.1 and DNS:boot.example, the CA after it in server-chain.pem), other-ca.pem (a CA
    that signed nothing here), wrong-name.pem/.key (SAN DNS:elsewhere.example only), expired.pem
    (the server key, expired yesterday)."""

    def __init__(self, directory: Path, server_names="IP:127.0.0.1,DNS:boot.example"):
        d = self.directory = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = self.authority("ca", "Stampede test CA")
        self.other_ca, _ = self.authority("other-ca", "Another CA")
        self.server, self.key = self.signed("server", server_names)
        self.chain = d / "server-chain.pem"
        self.chain.write_bytes(self.server.read_bytes() + self.ca.read_bytes())
        self.wrong_name, self.wrong_name_key = self.signed("wrong-name", "DNS:elsewhere.example")
        self.expired, _ = self.signed("expired", "IP:127.0.0.1", key=self.key, days="-1")
        for key in d.glob("*.key"):
            key.chmod(0o600)

    def authority(self, name, subject):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30",
                "-subj", f"/CN={subject}", "-addext", "basicConstraints=critical,CA:TRUE", cwd=self.directory)
        return self.directory / f"{name}.pem", self.directory / f"{name}.key"

    def signed(self, name, san, key=None, days="30"):
        if key is None:
            openssl("genrsa", "-out", f"{name}.key", "2048", cwd=self.directory)
            key = self.directory / f"{name}.key"
        openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", f"{name}.csr", cwd=self.directory)
        (self.directory / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", days,
                "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=self.directory)
        return self.directory / f"{name}.pem", key
