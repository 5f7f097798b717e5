#!/bin/bash
# Runs inside the test container: brings up 1 mon, 1 mgr, N BlueStore OSDs on file-backed
# devices (each with a small separate DB file so BlueFS spillover really happens) and 1 RGW,
# all as plain processes on loopback (the container uses host networking).
#
# The harness writes /cluster/ceph.conf and /cluster/params.env before starting us, and
# reads /cluster/state/{step,ready,failed}. Daemon logs go to /cluster/log/.
set -euo pipefail

C=/cluster
# shellcheck disable=SC1091
source "$C/params.env"   # MON_PORT RGW_PORT NUM_OSDS FSID RGW_ADMIN_UID
mkdir -p "$C/state" "$C/log" "$C/data"
exec >>"$C/log/bootstrap.log" 2>&1

step() {
  echo "$1" >"$C/state/step"; echo "== $(date +%T) $1"
  # Fault injection for the harness's own tests: fail at a named step.
  if [[ "${FAIL_AT_STEP:-}" == "$1" ]]; then echo "injected failure at $1"; false; fi
}
trap 'rc=$?; echo "step \"$(cat "$C/state/step" 2>/dev/null)\" exited $rc" >"$C/state/failed"' ERR

# Daemons use the Debian default paths; both point into the harness's directory so that
# state and logs are on the host's filesystem (no O_DIRECT through overlayfs) and the
# harness can delete them after the run.
rm -rf /etc/ceph && ln -sfn "$C" /etc/ceph
rm -rf /var/lib/ceph && ln -sfn "$C/data" /var/lib/ceph
mkdir -p /var/lib/ceph/mon /var/lib/ceph/mgr /var/lib/ceph/osd /var/lib/ceph/radosgw /var/run/ceph

# A new Tentacle cluster allows only aes256k cephx keys, which the host's Pacific clients can
# neither parse nor use (docs/testing.md, "Tentacle"). As on a cluster upgraded from an older
# release, the monmap also allows aes, and client.admin gets an aes key; the daemons keep
# Tentacle's default. Releases without key types have neither option.
admin_key_type=(); monmap_ciphers=()
monmaptool_help=$(monmaptool --help 2>&1 || true)   # not a pipe: pipefail and an early grep exit
if [[ "$monmaptool_help" == *--auth-allowed-ciphers* ]]; then
  admin_key_type=(--key-type aes); monmap_ciphers=(--auth-allowed-ciphers aes256k,aes)
fi

step "mon keyrings"
ceph-authtool --create-keyring /tmp/mon.keyring --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool --create-keyring "$C/ceph.client.admin.keyring" --gen-key -n client.admin "${admin_key_type[@]}" \
  --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
chmod 600 "$C/ceph.client.admin.keyring"
ceph-authtool /tmp/mon.keyring --import-keyring "$C/ceph.client.admin.keyring" >/dev/null

step "mon mkfs"
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "${monmap_ciphers[@]}" /tmp/monmap >/dev/null
ceph-mon --mkfs -i a --monmap /tmp/monmap --keyring /tmp/mon.keyring
step "mon start"
ceph-mon -i a

step "mon quorum"
for _ in $(seq 1 60); do
  ceph --connect-timeout 5 mon stat >/dev/null 2>&1 && break
  sleep 0.5
done
ceph --connect-timeout 5 mon stat

step "mgr"
mkdir -p /var/lib/ceph/mgr/ceph-x
ceph auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
  >/var/lib/ceph/mgr/ceph-x/keyring
ceph-mgr -i x

step "osds"
for _ in $(seq 1 "$NUM_OSDS"); do
  uuid=$(uuidgen)
  secret=$(ceph-authtool --gen-print-key)
  # The secret goes through a file, never argv.
  printf '{"cephx_secret": "%s"}' "$secret" >/tmp/osd-secret.json
  id=$(ceph osd new "$uuid" -i /tmp/osd-secret.json)
  rm -f /tmp/osd-secret.json
  dir=/var/lib/ceph/osd/ceph-$id
  mkdir -p "$dir"
  ceph-authtool --create-keyring "$dir/keyring" --name "osd.$id" --add-key "$secret" >/dev/null
  ceph-osd -i "$id" --mkfs --osd-uuid "$uuid" --no-mon-config
  ceph-osd -i "$id"
done

step "rgw"
mkdir -p /var/lib/ceph/radosgw/ceph-rgw.gw
ceph auth get-or-create client.rgw.gw mon 'allow rw' osd 'allow rwx' mgr 'allow rw' \
  >/var/lib/ceph/radosgw/ceph-rgw.gw/keyring
rgw_start() {
  radosgw -n client.rgw.gw --keyring /var/lib/ceph/radosgw/ceph-rgw.gw/keyring --pid-file "$C/state/rgw.pid"
}
rgw_start

step "rgw admin user"
# radosgw-admin generates the keys; they reach the host through a 0600 file, never argv.
umask 077
for _ in $(seq 1 120); do
  if radosgw-admin user info --uid "$RGW_ADMIN_UID" >/dev/null 2>&1; then break; fi
  if radosgw-admin user create --uid "$RGW_ADMIN_UID" --display-name "rgwkeeper admin" \
       --caps "buckets=*;users=*;usage=*;metadata=*;zone=read" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
radosgw-admin user info --uid "$RGW_ADMIN_UID" >"$C/rgw-admin-user.json"
umask 022

step "running"
touch "$C/state/ready"
# Stay in the foreground while the daemons (which forked) run; the harness stops the
# container by id. Meanwhile serve RGW restart requests (integration.cluster.restart_rgw):
# the request file holds how many seconds RGW stays down. RGW is stopped by its pid file.
# An RGW that ends without being asked (a crash) is recorded in state/rgw-died with the tail
# of its log, and started again: the test it died in fails saying so (tests/integration/
# conftest.py), and the tests after it still have an RGW.
trap - ERR
set +e
rgw_pid_alive() {  # the pid runs: not gone, not a zombie (field 3 of /proc/PID/stat)
  local st=Z
  [[ -n "$1" ]] || return 1
  { read -r _ _ st _ <"/proc/$1/stat"; } 2>/dev/null
  [[ "$st" != Z ]]
}
rgw_start_and_wait() {  # until the pid file names a new, running RGW (at most 60 s)
  local old=$1 pid
  rgw_start
  for _ in $(seq 1 300); do
    pid=$(cat "$C/state/rgw.pid" 2>/dev/null)
    if [[ "$pid" != "$old" ]] && rgw_pid_alive "$pid"; then return 0; fi
    sleep 0.2
  done
  return 1
}
deaths=0
while sleep 0.2; do
  if [[ ! -e "$C/state/rgw-restart" ]]; then
    pid=$(cat "$C/state/rgw.pid" 2>/dev/null)
    rgw_pid_alive "$pid" && continue
    deaths=$((deaths + 1))
    echo "== $(date +%T) rgw (pid $pid) ended without being asked to: starting it again"
    tail -n 400 "$C/log/ceph-client.rgw.gw.log" >"$C/log/rgw-died-$deaths.log" 2>/dev/null
    echo "$(date +%s) $pid $C/log/rgw-died-$deaths.log" >>"$C/state/rgw-died"
    rgw_start_and_wait "$pid" || echo "== $(date +%T) rgw did not start again"
    continue
  fi
  down=$(cat "$C/state/rgw-restart"); rm -f "$C/state/rgw-restart" "$C/state/rgw-restarted"
  pid=$(cat "$C/state/rgw.pid")
  echo "== $(date +%T) rgw restart: stopping pid $pid, down ${down}s"
  kill -TERM "$pid"
  for _ in $(seq 1 300); do
    rgw_pid_alive "$pid" || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  sleep "$down"
  rgw_start_and_wait "$pid"
  echo "== $(date +%T) rgw started again (pid $(cat "$C/state/rgw.pid" 2>/dev/null))"
  touch "$C/state/rgw-restarted"
done
