"""`check` with a slurm.login_host that does not resolve says so, naming the host, instead of asking to set it."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli


def test_check_says_the_login_host_does_not_resolve_instead_of_asking_to_set_it(cloudddp_home: Path) -> None:
    (cloudddp_home / "config.yaml").write_text("slurm:\n  login_host: nosuchhost.invalid\n")  # .invalid: RFC 2606
    result = cli("check", "--json", timeout=60)
    text = result.stdout + result.stderr
    assert "slurm.login_host nosuchhost.invalid: nosuchhost.invalid does not resolve" in text, text[-3000:]
    assert "correct the host name in slurm.login_host" in text, text[-3000:]
    assert "or set slurm.login_host" not in text, text[-3000:]
