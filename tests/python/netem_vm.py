"""A throw-away VM with a stock Debian kernel (QEMU, TCG emulation: KVM guests hang on this machine), in which the
swarm's tc plans are applied verbatim to network namespaces that stand for containers. This machine's kernel has
no netem; Debian's has it as a module. Used by tests/python/test_netem_vm.py.

The VM boots from an initramfs built here: busybox, the host's tc and ip with their libraries and netem
distribution tables, the kernel modules the plans need, one shell script per namespace (the plan, exactly as
testbed/cluster/swarm.py: apply_netem installs it in a container), and an init that wires the namespaces to a
bridge, applies the plans, measures, prints everything between markers on the serial console and powers off.
"""
from __future__ import annotations

import glob
import gzip
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MODULES = ("llc", "stp", "bridge", "veth", "sch_prio", "sch_netem", "cls_u32")  # dependency order
# dash is the shell (/bin/sh), as in the image: busybox's sh would run its own ip and tc applets, not these
BINARIES = ("/usr/sbin/tc", "/usr/sbin/ip", "/bin/dash")
DIST_DIR = "/usr/lib/x86_64-linux-gnu/tc"
APPLETS = ("mount", "mkdir", "insmod", "cat", "echo", "uname", "ping", "nc", "seq", "sleep", "poweroff")
BEGIN, END = "=====NETEM-VM-BEGIN=====", "=====NETEM-VM-END====="


@dataclass(frozen=True)
class Netns:
    name: str
    ip: str          # on eth0, in the deployment's /16
    plan: str        # shell script (testbed.cluster.shaping.to_shell)


def kernel() -> tuple[Path, Path] | None:
    """(vmlinuz, its modules folder) of an installed stock kernel, or None."""
    for vmlinuz in sorted(glob.glob("/boot/vmlinuz-*"), reverse=True):
        version = vmlinuz.split("vmlinuz-", 1)[1]
        mods = Path("/lib/modules") / version
        if os.access(vmlinuz, os.R_OK) and (mods / "kernel/net/sched/sch_netem.ko").exists():
            return Path(vmlinuz), mods
    return None


def missing() -> str | None:
    """Why the VM cannot be built here (None: it can)."""
    if not shutil.which("qemu-system-x86_64"):
        return "qemu-system-x86_64 not installed (Debian: qemu-system-x86)"
    if not os.path.exists("/bin/busybox") or not _is_static("/bin/busybox"):
        return "a static busybox not installed (Debian: busybox-static)"
    if kernel() is None:
        return "no stock kernel with sch_netem.ko in /boot and /lib/modules (Debian: linux-image-amd64)"
    for b in BINARIES:
        if not os.path.exists(b):
            return f"{b} not installed (Debian: iproute2)"
    if not shutil.which("cpio"):
        return "cpio not installed"
    return None


def _is_static(path: str) -> bool:
    p = subprocess.run(["ldd", path], capture_output=True, text=True)
    return "not a dynamic executable" in p.stdout + p.stderr


def _libraries(binary: str) -> set[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"(/\S+\.so[\S]*)", out)}


def _copy(src: str, root: Path) -> None:
    dst = root / src.lstrip("/")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), dst)


def init_script(nss: list[Netns], measure: str) -> str:
    lines = [
        "#!/bin/dash",
        # busybox's applets the init needs, by name (not --install: its ip and tc would shadow the real ones)
        f"for a in {' '.join(APPLETS)}; do /bin/busybox ln -s busybox /bin/$a; done",
        "export PATH=/usr/sbin:/bin",
        "mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t tmpfs run /run; mkdir -p /run/netns",
        f"for m in {' '.join(MODULES)}; do insmod /modules/$m.ko || echo \"insmod-failed $m\"; done",
        "ip link add br0 type bridge && ip link set br0 up",
        f"echo {BEGIN}",
        "echo kernel $(uname -r)",
    ]
    for n in nss:
        lines += [
            f"ip netns add {n.name}",
            f"ip link add v-{n.name} type veth peer name eth0 netns {n.name}",
            f"ip link set v-{n.name} master br0 up",
            f"ip -n {n.name} addr add {n.ip}/16 dev eth0",
            f"ip -n {n.name} link set eth0 up",
            f"ip -n {n.name} link set lo up",
            f"if ip netns exec {n.name} sh /plans/{n.name}.sh > /run/{n.name}.out 2>&1; then echo plan-ok {n.name};"
            f" else echo plan-failed {n.name}; cat /run/{n.name}.out; fi",
        ]
    lines += [measure, f"echo {END}", "poweroff -f"]
    return "\n".join(lines) + "\n"


def build_initramfs(nss: list[Netns], measure: str, out: Path) -> Path:
    _, mods = kernel()
    root = out.parent / "initramfs-root"
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "proc", "sys", "run", "dev", "modules", "plans", "tmp", "var"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.symlink("/run", root / "var/run")
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    os.symlink("dash", root / "bin/sh")
    for b in BINARIES:
        _copy(b, root)
        for lib in _libraries(b):
            _copy(lib, root)
    for dist in glob.glob(f"{DIST_DIR}/*.dist"):
        _copy(dist, root)
    dep = (mods / "modules.dep").read_text()
    for m in MODULES:
        rel = re.search(rf"^(\S*/{m}\.ko(?:\.xz)?):", dep, re.M).group(1)
        src = mods / rel
        if src.suffix == ".xz":
            (root / "modules" / f"{m}.ko").write_bytes(subprocess.run(["xz", "-dc", str(src)], capture_output=True,
                                                                      check=True).stdout)
        else:
            shutil.copy2(src, root / "modules" / f"{m}.ko")
    for n in nss:
        (root / "plans" / f"{n.name}.sh").write_text(n.plan)
    init = root / "init"
    init.write_text(init_script(nss, measure))
    init.chmod(0o755)
    files = subprocess.run(["find", "."], cwd=root, capture_output=True, text=True, check=True).stdout
    archive = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=files.encode(),
                             capture_output=True, check=True).stdout
    out.write_bytes(gzip.compress(archive, compresslevel=1))
    return out


def boot(initramfs: Path, timeout_s: float = 300, memory_mb: int = 512) -> str:
    """Boot the stock kernel on initramfs under TCG; the serial console's text between the markers."""
    vmlinuz, _ = kernel()
    cmd = ["qemu-system-x86_64", "-accel", "tcg", "-m", str(memory_mb), "-nographic", "-no-reboot",
           "-nic", "none", "-kernel", str(vmlinuz), "-initrd", str(initramfs),
           "-append", "console=ttyS0 panic=-1 quiet loglevel=3"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    text = p.stdout.replace("\r", "")
    if BEGIN not in text or END not in text:
        raise RuntimeError(f"the VM did not finish (exit {p.returncode}); its console ends with:\n"
                           + "\n".join(text.splitlines()[-30:]))
    return text.split(BEGIN, 1)[1].split(END, 1)[0]
