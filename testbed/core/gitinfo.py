"""The code version a run records (meta.json `git_sha`): the commit of the checkout whose code runs, with `-dirty`
when it has local changes.

On the host `git` says both. The driver container has no git and runs the checkout mounted at /work/edge-txn, which
need not be the checkout of the host job that started it: there the commit is read from that checkout's .git files
(HEAD, a loose or packed ref; a worktree's or submodule's `.git` file naming its git folder), and the dirty mark is
taken from the host job (host_env) only when the host's checkout is this one (same directory: device and inode) at
the same commit. Otherwise whether the code had local changes is not known, and the value says so:
`<sha>-changes-unknown`. None when not even the commit can be read.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from testbed.core.paths import REPO

ENV_SHA = "EDGE_TXN_GIT_SHA"            # the host job's code version (host_env)
ENV_CHECKOUT = "EDGE_TXN_GIT_CHECKOUT"  # and which checkout that is: "<st_dev>:<st_ino>" of its directory
UNKNOWN = "-changes-unknown"


def code_version(repo: Path = REPO) -> str | None:
    """`<sha>`, `<sha>-dirty`, `<sha>-changes-unknown` or None, for the checkout at repo (see the module's doc)."""
    sha = _git(repo, "rev-parse", "HEAD")
    if sha:
        status = _git(repo, "status", "--porcelain", "--untracked-files=no")
        return sha + (UNKNOWN if status is None else "-dirty" if status else "")
    sha = read_head(repo)
    if sha is None:
        return None
    host = os.environ.get(ENV_SHA, "")
    if host.split("-")[0] == sha and os.environ.get(ENV_CHECKOUT) == checkout_id(repo):
        return host
    return sha + UNKNOWN


def host_env(repo: Path = REPO) -> dict:
    """Environment for a job the host starts in the driver: this checkout's code version and identity."""
    version = code_version(repo)
    return {ENV_SHA: version, ENV_CHECKOUT: checkout_id(repo)} if version else {}


def checkout_id(repo: Path = REPO) -> str:
    """The directory's identity, the same on the host and through the driver's bind mount."""
    try:
        st = os.stat(repo)
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}"


def read_head(repo: Path = REPO) -> str | None:
    """The commit HEAD names, from the files of repo's .git (no git needed); None when they cannot be read."""
    try:
        gitdir = repo / ".git"
        if gitdir.is_file():  # a worktree or a submodule: "gitdir: <path>", absolute or relative to repo
            text = gitdir.read_text().strip()
            if not text.startswith("gitdir:"):
                return None
            gitdir = repo / text[len("gitdir:"):].strip()
        common = gitdir / (gitdir / "commondir").read_text().strip() if (gitdir / "commondir").is_file() else gitdir
        head = (gitdir / "HEAD").read_text().strip()
        for _ in range(5):  # HEAD -> refs/heads/main (-> a symbolic ref, rarely)
            if not head.startswith("ref:"):
                break
            head = _ref(gitdir, common, head[len("ref:"):].strip())
    except (OSError, UnicodeDecodeError):
        return None
    return head if head and re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", head) else None


def _ref(gitdir: Path, common: Path, ref: str) -> str | None:
    for d in (gitdir, common):  # per-worktree refs first, then the shared ones
        if (d / ref).is_file():
            return (d / ref).read_text().strip()
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            words = line.split()
            if len(words) == 2 and words[1] == ref and not line.startswith(("#", "^")):
                return words[0]
    return None


def _git(repo: Path, *args) -> str | None:
    """git's output, or None when there is no git or it fails (no repository, a checkout it does not trust)."""
    try:
        r = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=repo)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None
