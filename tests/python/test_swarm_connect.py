"""swarm.connect() on ssh:// hosts that never answer: 'connecting to ...' per host, then within about
SSH_CONNECT_TIMEOUT_S one line saying what failed. Every server here is on loopback."""
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker  # noqa: F401 -- imported before any timing
import paramiko
import pytest

from testbed.cluster import swarm
from testbed.core.config import load_exp_config
from testbed.cluster.hosts import Host

REPO = Path(__file__).resolve().parents[2]
T = 2.0            # the connect timeout the tests use
SLACK = 1.0        # on top of it: thread start, a loaded 2-core machine


def listener(backlog=8) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    return s


@pytest.fixture
def silent():
    """Accepts TCP (the kernel completes the handshake) and never says a word."""
    s = listener()
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def syn_dropping():
    """A port whose SYNs go unanswered: backlog 0, its one accept slot filled, never accept()ed."""
    s = listener(backlog=0)
    port = s.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=2)
    probe = socket.socket()
    probe.settimeout(0.5)
    with pytest.raises(TimeoutError):   # the premise: a connect really hangs there
        probe.connect(("127.0.0.1", port))
    probe.close()
    yield port
    filler.close()
    s.close()


@pytest.fixture
def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def serve(sock: socket.socket, handle) -> None:
    def loop():
        while True:
            try:
                c, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


def try_connect(port: int, timeout: float = T, user="nobody"):
    """(SwarmError message, seconds taken, log lines) for a host reached at ssh://user@127.0.0.1:port."""
    h = Host("edge-test-host", docker_url=f"ssh://{user}@127.0.0.1:{port}")
    logged = []
    t0 = time.monotonic()
    with pytest.raises(swarm.SwarmError) as e:
        swarm.connect([h], ssh_timeout_s=timeout, log=logged.append)
    took = time.monotonic() - t0
    assert logged == [f"connecting to edge-test-host (ssh://{user}@127.0.0.1:{port}) ..."]
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(
        f"host edge-test-host (ssh://{user}@127.0.0.1:{port}): cannot reach Docker over SSH: ")
    return msg, took, logged


@pytest.fixture(autouse=True)
def no_user_ssh_config(tmp_path, monkeypatch):
    """The user's ~/.ssh (config, known_hosts, keys) and agent stay out of it."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


def test_host_that_accepts_but_never_speaks(silent):
    msg, took, _ = try_connect(silent)
    assert T - 0.1 <= took < T + SLACK
    assert f"no SSH banner within 2 s from 127.0.0.1:{silent}; something accepts TCP on port {silent} but no SSH " \
           "server speaks" in msg


def test_host_that_drops_syns(syn_dropping):
    msg, took, _ = try_connect(syn_dropping)
    assert T - 0.1 <= took < T + SLACK
    assert f"timed out connecting to 127.0.0.1:{syn_dropping} (2 s); is the host up and port {syn_dropping} open " \
           "to this machine (firewall)? SSH_CONNECT_TIMEOUT_S in exp_config.py sets the wait" in msg


def test_closed_port_is_refused_at_once(closed_port):
    msg, took, _ = try_connect(closed_port)
    assert took < 1.0
    assert msg.endswith(f"connection refused by 127.0.0.1:{closed_port}; is sshd running on 127.0.0.1, on port "
                        f"{closed_port}?")


def test_stall_after_the_banner_is_bounded_too():
    """Banner sent, then nothing: paramiko's key exchange would wait forever."""
    s = listener()
    conns = []

    def banner_only(c):
        conns.append(c)
        c.sendall(b"SSH-2.0-OpenSSH_9.2p1 stalls\r\n")
    serve(s, banner_only)
    port = s.getsockname()[1]
    msg, took, _ = try_connect(port)
    assert T - 0.1 <= took < 2 * T + SLACK   # the probe passes at once; docker-py's connection gets T
    assert msg.endswith(f"no answer within 2 s after the SSH banner (key exchange, authentication or the Docker API "
                        f"stalled); does `ssh -p {port} nobody@127.0.0.1 docker version` answer?")
    s.close()


def test_not_an_ssh_server():
    s = listener()
    serve(s, lambda c: c.sendall(b"HTTP/1.1 400 Bad Request\r\n" + b"x" * 9000))
    msg, took, _ = try_connect(s.getsockname()[1])
    assert took < T and "is not an SSH server (it sent 'HTTP/1.1 400 Bad Request\\r')" in msg
    s.close()


class _Deny(paramiko.ServerInterface):
    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_FAILED


def test_real_ssh_server_auth_failed_and_unknown_host_key(no_user_ssh_config):
    host_key, user_key = paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)
    user_key.write_private_key_file(str(no_user_ssh_config / ".ssh" / "id_rsa"))
    s = listener()
    port = s.getsockname()[1]

    def ssh_server(c):
        t = paramiko.Transport(c)
        t.add_server_key(host_key)
        try:
            t.start_server(server=_Deny())
        except (paramiko.SSHException, EOFError):
            pass   # the probe hangs up after the banners
    serve(s, ssh_server)

    msg, took, _ = try_connect(port)   # no known_hosts: docker-py's RejectPolicy refuses the server
    assert took < T and msg.endswith(f"the host key of 127.0.0.1 is not in ~/.ssh/known_hosts; ssh to it once "
                                     f"(`ssh -p {port} nobody@127.0.0.1`) to check and accept its key")
    (no_user_ssh_config / ".ssh" / "known_hosts").write_text(
        f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    msg, took, _ = try_connect(port)   # known host, key offered and refused
    assert took < T + SLACK and msg.endswith(f"auth failed as nobody; can this machine `ssh -p {port} "
                                             "nobody@127.0.0.1` with a key and no password (ssh-copy-id)?")
    s.close()


def test_ssh_config_supplies_the_port_as_for_docker_py(no_user_ssh_config, silent):
    (no_user_ssh_config / ".ssh" / "config").write_text(f"Host edge-alias\n  HostName 127.0.0.1\n  Port {silent}\n"
                                                        "  User alice\n")
    assert swarm.ssh_target("ssh://edge-alias") == ("127.0.0.1", silent, "alice", False)
    assert swarm.ssh_target("ssh://bob@edge-alias:2222") == ("127.0.0.1", 2222, "bob", False)
    assert swarm.ssh_target("ssh://10.0.0.5") == ("10.0.0.5", 22, None, False)
    h = Host("edge-alias")
    t0 = time.monotonic()
    with pytest.raises(swarm.SwarmError, match=f"no SSH banner within 1 s from 127.0.0.1:{silent}"):
        swarm.connect([h], ssh_timeout_s=1, log=lambda m: None)
    assert time.monotonic() - t0 < 1 + SLACK


def test_clients_of_earlier_hosts_are_closed(monkeypatch, closed_port):
    class FakeClient:
        closed = False

        def close(self):
            self.closed = True
    first = FakeClient()
    monkeypatch.setattr(swarm, "_open_docker", lambda url, timeout: first)
    hosts = [Host("a-host", docker_url="tcp://127.0.0.1:1"), Host("b-host", docker_url=f"ssh://127.0.0.1:{closed_port}")]
    with pytest.raises(swarm.SwarmError, match="^host b-host .*connection refused"):
        swarm.connect(hosts, ssh_timeout_s=T, log=lambda m: None)
    assert first.closed


def test_knob_default_and_range():
    assert load_exp_config({}).ssh_connect_timeout_s == 15 == load_exp_config().ssh_connect_timeout_s
    assert load_exp_config({"SSH_CONNECT_TIMEOUT_S": 2.5}).ssh_connect_timeout_s == 2.5
    for bad in (0, 301, "15", None):
        with pytest.raises(ValueError, match=rf"^SSH_CONNECT_TIMEOUT_S={bad!r}: must be a number in \[1, 300\]$"):
            load_exp_config({"SSH_CONNECT_TIMEOUT_S": bad})


@pytest.mark.parametrize("fn", ["up", "down"])
def test_up_and_down_use_the_knob(monkeypatch, tmp_path, fn):
    seen = {}

    def fake_connect(hosts, timeout=20, ssh_timeout_s=None, log=None):
        seen.update(ssh_timeout_s=ssh_timeout_s, log=log)
        raise swarm.SwarmError("stop here")
    monkeypatch.setattr(swarm, "connect", fake_connect)
    cfg = load_exp_config({"SSH_CONNECT_TIMEOUT_S": 7})
    log = print
    with pytest.raises(swarm.SwarmError, match="stop here"):
        getattr(swarm, fn)(cfg, [Host("localhost")], containers_yml=tmp_path / "containers.yml", log=log)
    assert seen == {"ssh_timeout_s": 7, "log": log}


def test_start_containers_says_connecting_then_one_line(tmp_path, silent):
    (tmp_path / "exp_config.py").write_text("SSH_CONNECT_TIMEOUT_S = 2\n")
    (tmp_path / "hosts.yml").write_text(f"hosts:\n  - address: edge-test-host\n"
                                        f"    docker_url: ssh://127.0.0.1:{silent}\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(REPO / "start_containers.py"), "--config", "exp_config.py",
                        "--hosts", "hosts.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 30   # bounded (most of it is Python starting up)
    assert p.returncode == 2
    assert p.stdout.splitlines() == [f"connecting to edge-test-host (ssh://127.0.0.1:{silent}) ..."]
    assert p.stderr.splitlines() == [
        f"start_containers: error: host edge-test-host (ssh://127.0.0.1:{silent}): cannot reach Docker over SSH: "
        f"no SSH banner within 2 s from 127.0.0.1:{silent}; something accepts TCP on port {silent} but no SSH server "
        "speaks: is sshd running there and not overloaded, and is this its port?"]


def test_every_address_of_a_name_is_tried(monkeypatch, silent, closed_port):
    """A name with two addresses, the first refusing (say, IPv6 without sshd): the second is used, as paramiko
    would; with both refusing, refused."""
    real = socket.getaddrinfo
    addrs = {"refusing": [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", closed_port))],
             "silent": [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", silent))]}
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **kw: (
        addrs["refusing"] + addrs["silent"] if host == "two-addrs" else
        addrs["refusing"] * 2 if host == "two-refusing" else real(host, port, *a, **kw)))
    with pytest.raises(swarm._Unreachable, match="^no SSH banner within 1 s from two-addrs:22$"):
        swarm.probe_ssh("two-addrs", 22, 1)
    with pytest.raises(swarm._Unreachable, match="^connection refused by two-refusing:22$"):
        swarm.probe_ssh("two-refusing", 22, 1)


def test_a_reset_before_the_banner_is_not_taken_for_a_refusing_sshd():
    """Accepted, then reset (SO_LINGER 0: an RST, as a firewall or an overloaded sshd may send), vs closed."""
    import struct

    def reset(c):
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
    s = listener()
    serve(s, reset)
    port = s.getsockname()[1]
    msg, took, _ = try_connect(port)
    assert took < T, msg
    assert msg.endswith(f"127.0.0.1:{port} reset the connection before its SSH banner; reset by the peer: a "
                        "firewall or sshd dropping it (MaxStartups)?"), msg
    s.close()
    s = listener()
    serve(s, lambda c: c.close())
    port = s.getsockname()[1]
    msg, took, _ = try_connect(port)
    assert msg.endswith(f"127.0.0.1:{port} closed the connection before its SSH banner; is sshd on 127.0.0.1 "
                        "refusing this machine (MaxStartups, tcp wrappers)?"), msg
    s.close()


def test_a_reset_that_connect_itself_reports_is_the_same_reset_before_the_banner(monkeypatch):
    """On a loaded machine the peer may accept and reset before this thread sees its connect return: connect then
    fails with ECONNRESET (a SYN refused is ECONNREFUSED), and that is the same reset before the banner (the reset
    test above met it under `make test` once, then named 'reset while connecting')."""
    class ResetOnConnect(socket.socket):
        def connect(self, addr):
            raise ConnectionResetError(104, "Connection reset by peer")
    monkeypatch.setattr(socket, "socket", ResetOnConnect)
    with pytest.raises(swarm._Unreachable) as e:
        swarm.probe_ssh("127.0.0.1", 2222, 1)
    assert (e.value.what, e.value.hint) == ("127.0.0.1:2222 reset the connection before its SSH banner",
                                            "reset by the peer: a firewall or sshd dropping it (MaxStartups)?")
