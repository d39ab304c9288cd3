#!/bin/sh
# Container entrypoint: start sshd (unless EDGE_TXN_SSHD=0), then exec the command (default: sleep infinity).
# Root's authorized key comes from the deployment, never from the image:
#   EDGE_TXN_AUTHORIZED_KEYS='ssh-ed25519 AAAA...'   and/or   a mounted /run/edge-txn/authorized_keys
set -eu
if [ "${EDGE_TXN_SSHD:-1}" != 0 ]; then
  ssh-keygen -A >/dev/null                       # per-container host keys, only if missing
  # replace root's keys only when the deployment provides some (a later `docker exec` install survives restarts)
  if [ -r /run/edge-txn/authorized_keys ] || [ -n "${EDGE_TXN_AUTHORIZED_KEYS:-}" ]; then
    (umask 077; mkdir -p /root/.ssh
     { cat /run/edge-txn/authorized_keys 2>/dev/null || true
       [ -z "${EDGE_TXN_AUTHORIZED_KEYS:-}" ] || printf '%s\n' "$EDGE_TXN_AUTHORIZED_KEYS"; } > /root/.ssh/authorized_keys)
  fi
  mkdir -p /run/sshd
  /usr/sbin/sshd || { echo "entrypoint: sshd failed to start" >&2; exit 1; }
fi
# netem shaping installed by start_containers.py: re-applied on every (re)start (idempotent plan)
if [ -r /etc/edge-txn/tc.sh ]; then
  sh /etc/edge-txn/tc.sh || echo "entrypoint: re-applying /etc/edge-txn/tc.sh failed" >&2
fi
[ $# -gt 0 ] || set -- sleep infinity
exec "$@"
