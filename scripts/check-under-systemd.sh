#!/bin/sh
# Runs systemd/burstscope-agent.service, hardening and all, under a real systemd as PID 1
# of a fresh PID, mount and UTS namespace, and checks what the unit promises: READY=1
# (Type=notify), the dynamic user, watchdog pings, a restart when the sampler stalls,
# and a clean stop. For developers on a machine without systemd as init (containers, CI);
# needs root, unshare(1), nsenter(1), curl and /lib/systemd/systemd.
#
#   sudo scripts/check-under-systemd.sh /opt/burstscope-check
#   sudo TIMING=1 scripts/check-under-systemd.sh /opt/burstscope-check   # with timing.conf
#
# VENV is created with /usr/bin/python3 (the unit's ProtectHome=yes and DynamicUser= can
# neither see a pyenv interpreter under /root nor read /root), and this checkout is
# installed into it. Only the unit under test and empty stand-in targets are loaded
# (SYSTEMD_UNIT_PATH without the system's units), so no other service, tmpfiles clean-up
# included, runs; /tmp, /var/tmp and /run are private tmpfs in the namespace. Left behind:
# the unit's own /etc/burstscope and /var/lib/private/burstscope, removed at the end.
set -eu

VENV=${1:?usage: $0 VENV_DIRECTORY}
PORT=${PORT:-19847}
HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${VENV%/}-check.XXXXXX")  # not under /tmp, /var/tmp or /run: those are private
chmod 755 "$WORK"
trap 'pkill -9 -f "systemd --system --unit=burstscope-check.target" 2>/dev/null || true;
      rm -rf "$WORK" /etc/burstscope /var/lib/private/burstscope;
      rm -f /var/lib/burstscope; rmdir /var/lib/private 2>/dev/null || true' EXIT

[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }
[ -x "$VENV/bin/burstscope" ] || {
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "${HERE}[mqtt]"
}

units="$WORK/units"
mkdir -p "$units/burstscope-agent.service.d"
cp "$HERE/systemd/burstscope-agent.service" "$units/"
for target in sysinit basic shutdown multi-user network-online sockets paths timers slices local-fs; do
    printf '[Unit]\nDescription=stand-in %s\nDefaultDependencies=no\n' "$target" >"$units/$target.target"
done
printf '[Unit]\nDescription=burstscope check\nWants=burstscope-agent.service\n' \
    >"$units/burstscope-check.target"
cat >"$units/burstscope-agent.service.d/check.conf" <<EOF
[Service]
ExecStart=
ExecStart=$VENV/bin/burstscope agent --source sim --listen 127.0.0.1:$PORT
StandardOutput=append:$WORK/agent.log
StandardError=append:$WORK/agent.log
EOF
if [ "${TIMING:-0}" = 1 ]; then
    # The opt-in drop-in as shipped, on the CPUs this machine has.
    cp "$HERE/systemd/burstscope-agent.service.d/timing.conf.example" \
        "$units/burstscope-agent.service.d/timing.conf"
    printf '[Service]\nCPUAffinity=\nCPUAffinity=0-%d\n' $(($(nproc) - 1)) \
        >"$units/burstscope-agent.service.d/zz-cpus.conf"
fi
cat >"$WORK/init.sh" <<EOF
#!/bin/sh
mount --make-rprivate /
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var/tmp
mount -t tmpfs tmpfs /run
export SYSTEMD_UNIT_PATH=$units container=other
exec /lib/systemd/systemd --system --unit=burstscope-check.target --log-target=console
EOF
chmod +x "$WORK/init.sh"
unshare --pid --fork --mount --uts --mount-proc "$WORK/init.sh" >"$WORK/systemd.log" 2>&1 &

manager() { pgrep -f "^/lib/systemd/systemd --system --unit=burstscope-check.target" | head -1; }
show() { nsenter -t "$(manager)" -m -p systemctl show burstscope-agent --no-pager -p "$1" --value; }
inside() { nsenter -t "$(manager)" -m -p "$@"; }  # PIDs as the namespace numbers them
fail() { echo "FAIL: $*" >&2; cat "$WORK/agent.log" >&2 || true; exit 1; }
wait_for() {  # wait_for PROPERTY VALUE SECONDS
    i=0
    while [ "$(show "$1" 2>/dev/null)" != "$2" ]; do
        i=$((i + 1)); [ "$i" -le $(($3 * 10)) ] || return 1; sleep 0.1
    done
}

sleep 1
wait_for SubState running 30 || fail "not running (Type=notify READY=1 never came)"
echo "ready: $(show StatusText)"
echo "user: $(show User), watchdog $(show WatchdogUSec)"
curl -sf "http://127.0.0.1:$PORT/metrics" | grep -q '^burstscope_sampler_ticks_total' \
    || fail "/metrics does not answer"
if [ "${TIMING:-0}" = 1 ]; then
    curl -sf "http://127.0.0.1:$PORT/metrics" | grep -q '^burstscope_sampler_realtime 1' \
        || fail "the timing drop-in did not give the sampler SCHED_FIFO"
    echo "timing drop-in: the sampler runs SCHED_FIFO"
fi
sleep 3
[ -n "$(show WatchdogTimestamp)" ] || fail "no watchdog ping"
sampler=$(inside pgrep -P "$(show MainPID)" -f multiprocessing-fork | head -1)
inside kill -STOP "$sampler"
echo "sampler $sampler stopped at $(date +%T): expecting a watchdog restart"
wait_for NRestarts 1 25 || fail "no restart after the sampler stalled"
wait_for SubState running 30 || fail "not running again after the restart"
echo "restarted at $(date +%T): main PID $(show MainPID), restarts $(show NRestarts)"
started=$(date +%s.%N)
inside systemctl stop burstscope-agent
stopped=$(date +%s.%N)
[ "$(show Result)" = success ] || fail "stop result $(show Result)"
echo "stopped in $(awk "BEGIN { printf \"%.2f\", $stopped - $started }") s, result $(show Result)"
tail -n 3 "$WORK/agent.log"
echo "OK"
