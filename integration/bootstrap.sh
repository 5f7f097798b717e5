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
source "$C/params.env"   # MON_PORT RGW_PORT RGW2_PORT NUM_OSDS FSID RGW_ADMIN_UID
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
mkdir -p /var/lib/ceph/mon /var/lib/ceph/mgr /var/lib/ceph/osd /var/lib/ceph/radosgw /var/lib/ceph/crash /var/run/ceph

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
# RGW runs in the foreground as this script's child, so that when it ends the watch below can
# tell how (its exit status or signal); its log starts being read from where it stood at start.
rgw_start() {
  rgw_log_from=$(stat -c %s "$C/log/ceph-client.rgw.gw.log" 2>/dev/null || echo 0)
  radosgw -f -n client.rgw.gw --keyring /var/lib/ceph/radosgw/ceph-rgw.gw/keyring \
    >>"$C/log/rgw.out" 2>&1 &
  rgw_child=$!
  echo "$rgw_child" >"$C/state/rgw.pid"   # a radosgw in the foreground writes no pid file
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
rgw_how_it_ended() {  # sets rgw_how: "exit N" or "signal NAME", from the status of the reaped child
  # Called in this shell, never in $(...): a subshell forked while RGW was still an unreaped
  # zombie is not its parent, and its wait said "exit 127" (a CI run saw that for a SIGKILL).
  local rc=0
  wait "$1" 2>/dev/null || rc=$?
  if ((rc > 128)); then rgw_how="signal $(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))"; else rgw_how="exit $rc"; fi
}
rgw_record_death() {  # the log since this RGW started, the lines that say why, any crash report
  local n=$1 pid=$2 how=$3 out="$C/log/rgw-died-$1.log"
  {
    echo "rgw pid $pid ended without being asked to: $how"
    echo "--- lines that may say why (signal, assert, shutdown) ---"
    tail -c +"$((rgw_log_from + 1))" "$C/log/ceph-client.rgw.gw.log" 2>/dev/null \
      | grep -E -m 40 "Caught signal|ceph_assert|FAILED|terminate called|received +signal|suicide|heartbeat_map|shutting down|exiting|abort" || true
    tail -n 20 "$C/log/rgw.out" 2>/dev/null | sed 's/^/stdout+stderr: /'
    for meta in "$C"/data/crash/*/meta; do
      [[ -e "$meta" && "$meta" -nt "$C/state/rgw.pid.started" ]] && { echo "--- crash report $meta ---"; head -c 4000 "$meta"; echo; }
    done
    # The thread that caught the signal, and its events in Ceph's dump of recent events (which
    # logs at higher levels than the file): what that thread was doing when it died.
    tid=$(tail -c +"$((rgw_log_from + 1))" "$C/log/ceph-client.rgw.gw.log" 2>/dev/null | grep -E "Caught signal" \
      | tail -n 1 | awk '{for (i = 1; i <= NF; i++) if (length($i) == 12 && $i ~ /^[0-9a-f]+$/) { print $i; exit }}')
    if [[ -n "$tid" ]]; then
      echo "--- the last events of thread $tid, which caught the signal ---"
      tail -c +"$((rgw_log_from + 1))" "$C/log/ceph-client.rgw.gw.log" 2>/dev/null | grep -F " $tid " | tail -n 120
    fi
    echo "--- end of its log ---"
    tail -c +"$((rgw_log_from + 1))" "$C/log/ceph-client.rgw.gw.log" 2>/dev/null | tail -n 600
  } >"$out" 2>&1
  echo "$(date +%s) ${pid:-?} $out" >>"$C/state/rgw-died"
}
# The second RGW (client.rgw.gw2), on request only: state/rgw2-start starts it, state/rgw2-stop
# stops it by its pid; each answers with rgw2-started / rgw2-stopped.
rgw2_serve() {
  local pid
  if [[ -e "$C/state/rgw2-start" ]]; then
    rm -f "$C/state/rgw2-start"
    if ! rgw_pid_alive "$(cat "$C/state/rgw2.pid" 2>/dev/null)"; then
      mkdir -p /var/lib/ceph/radosgw/ceph-rgw.gw2
      ceph auth get-or-create client.rgw.gw2 mon 'allow rw' osd 'allow rwx' mgr 'allow rw' \
        >/var/lib/ceph/radosgw/ceph-rgw.gw2/keyring
      radosgw -f -n client.rgw.gw2 --keyring /var/lib/ceph/radosgw/ceph-rgw.gw2/keyring \
        >>"$C/log/rgw2.out" 2>&1 &
      echo "$!" >"$C/state/rgw2.pid"
      echo "== $(date +%T) second rgw started (pid $!)"
    fi
    touch "$C/state/rgw2-started"
  fi
  if [[ -e "$C/state/rgw2-stop" ]]; then
    rm -f "$C/state/rgw2-stop"
    pid=$(cat "$C/state/rgw2.pid" 2>/dev/null)
    if [[ -n "$pid" ]]; then
      kill -TERM "$pid" 2>/dev/null
      for _ in $(seq 1 30); do  # 3 s: radosgw takes 20 s to shut down cleanly, and nothing here needs that
        rgw_pid_alive "$pid" || break
        sleep 0.1
      done
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      rm -f "$C/state/rgw2.pid"
      echo "== $(date +%T) second rgw stopped (pid $pid)"
    fi
    touch "$C/state/rgw2-stopped"
  fi
}
deaths=0
touch "$C/state/rgw.pid.started"
while sleep 0.2; do
  rgw2_serve
  if [[ ! -e "$C/state/rgw-restart" ]]; then
    rgw_pid_alive "$rgw_child" && continue
    pid=$rgw_child
    rgw_how_it_ended "$pid"
    how=$rgw_how
    deaths=$((deaths + 1))
    echo "== $(date +%T) rgw (pid $pid) ended without being asked to ($how): starting it again"
    rgw_record_death "$deaths" "$pid" "$how"
    touch "$C/state/rgw.pid.started"
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
  [[ "$pid" == "$rgw_child" ]] && wait "$pid" 2>/dev/null
  sleep "$down"
  touch "$C/state/rgw.pid.started"
  rgw_start_and_wait "$pid"
  echo "== $(date +%T) rgw started again (pid $(cat "$C/state/rgw.pid" 2>/dev/null))"
  touch "$C/state/rgw-restarted"
done
