#!/usr/bin/env bash
# A real single-node SLURM cluster for the tests, owned by this script and nothing else.
#
#   tests/slurm/cluster.sh up   [DIR]   install slurm-wlm and munge if missing, start munged,
#                                       slurmctld and slurmd, wait for the node to be idle;
#                                       prints SLURM_CONF=DIR/slurm.conf (also in DIR/env)
#   tests/slurm/cluster.sh down [DIR]   stop exactly the daemons `up` started (pids in DIR/pids)
#   tests/slurm/cluster.sh status [DIR]
#
# DIR defaults to $TRUSTLIT_SLURM_DIR or ${TMPDIR:-/tmp}/trustlit-slurm. Everything (config, munge
# key and socket, state, spool, logs, pids) lives under DIR: /etc/slurm and /etc/munge are never
# touched, so a machine that already runs SLURM or munge is left alone. Clients find this
# cluster through SLURM_CONF.
#
# The node is this host with 2 CPUs (no cgroups: proctrack/linuxproc, task/none; no accounting,
# so `sacct` is unavailable: use squeue / scontrol show job). JobRequeue=1, a short KillWait and
# a short credential lifetime (which is also how long a requeued job waits before restarting,
# 120 s by default) keep the requeue test short. A second partition `gpu` declares two fake GPU
# nodes (4 GPUs each) as powered-down cloud nodes whose resume program does nothing:
# `sbatch --test-only` validates multi-GPU and multi-node scripts against them (it refuses
# FUTURE or DOWN nodes); no test runs a job there (it would wait for nodes that never come).
set -euo pipefail

ACTION=${1:-}
DIR=${2:-${TRUSTLIT_SLURM_DIR:-${TMPDIR:-/tmp}/trustlit-slurm}}
CPUS=${TRUSTLIT_SLURM_CPUS:-2}
CTLD_PORT=${TRUSTLIT_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${TRUSTLIT_SLURM_SLURMD_PORT:-16818}
CRED_EXPIRE=${TRUSTLIT_SLURM_CRED_EXPIRE:-10}
CONF=$DIR/slurm.conf

log() { echo "cluster.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] && return
    die "needs root (apt-get, and slurmd runs jobs as their owner); run: sudo $0 $ACTION $DIR"
}

# Debian's packages; the postinst scripts may try to start services: policy-rc.d stops that,
# and any daemon they start anyway is not ours to manage (we use our own config and socket).
install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null && return
    log "installing slurm-wlm and munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

write_munge_key() {
    mkdir -p "$DIR/munge"
    chmod 0755 "$DIR/munge"  # clients of any user reach the socket; the key itself stays 0400
    [ -s "$DIR/munge/munge.key" ] && return
    head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
    chmod 0400 "$DIR/munge/munge.key"
}

write_slurm_conf() {
    local host
    host=$(hostname -s)
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/pids"
    cat >"$CONF" <<CONF
# Written by tests/slurm/cluster.sh for the trustlit tests: one node, this host.
ClusterName=trustlit-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=$CRED_EXPIRE
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/state/slurmctld.pid
SlurmdPidFile=$DIR/spool/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=600
SchedulerParameters=sched_interval=2
SuspendProgram=/bin/true
ResumeProgram=/bin/true
SuspendTime=600
SuspendExcNodes=$host
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
NodeName=fakegpu[1-2] CPUs=16 Gres=gpu:4 State=CLOUD
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=fakegpu[1-2] MaxTime=INFINITE State=UP
CONF
    # slurmd reads gres.conf next to slurm.conf; this node has no GPU
    : >"$DIR/gres.conf"
    echo "export SLURM_CONF=$CONF" >"$DIR/env"
}

# Starts a daemon in the foreground flag mode, detached, and records the pid we started.
start_daemon() {
    local name=$1
    shift
    setsid "$@" >>"$DIR/log/$name.stdout" 2>&1 </dev/null &
    echo $! >"$DIR/pids/$name"
}

# Running, not a zombie waiting to be reaped (kill -0 succeeds on those too).
alive() {
    local pid
    [ -s "$DIR/pids/$1" ] || return 1
    pid=$(cat "$DIR/pids/$1")
    kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" | cut -c1)" != Z ]
}

wait_for() {
    local what=$1 seconds=$2
    shift 2
    for _ in $(seq "$seconds"); do
        "$@" >/dev/null 2>&1 && return
        sleep 1
    done
    log "timed out after ${seconds}s waiting for $what; logs:"
    tail -n 20 "$DIR"/log/* >&2 || true
    return 1
}

# Idle, or running jobs (an `up` of a cluster already up must not give up on it).
node_ready() { case "$(sinfo -h -p debug -o %t)" in idle | mix | alloc | comp) true ;; *) false ;; esac; }

# A half-started cluster is stopped again, so a failed `up` leaves nothing running.
fail_up() {
    down
    die "cluster did not come up (logs in $DIR/log)"
}

up() {
    need_root
    install_packages
    mkdir -p "$DIR"
    chmod 0755 "$DIR"  # jobs read their output dirs from here; munged wants x on the socket dir
    if alive slurmctld || alive slurmd || alive munged; then
        log "already up ($DIR)"
    else
        write_munge_key
        write_slurm_conf
        export SLURM_CONF=$CONF
        start_daemon munged munged --foreground --force --socket="$DIR/munge/munge.socket" \
            --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
            --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
        wait_for "munged" 20 test -S "$DIR/munge/munge.socket" || fail_up
        start_daemon slurmctld slurmctld -D -i -f "$CONF"
        wait_for "slurmctld" 30 scontrol ping || fail_up
        start_daemon slurmd slurmd -D -f "$CONF"
    fi
    export SLURM_CONF=$CONF
    wait_for "node $(hostname -s) to be ready" 60 node_ready || fail_up
    log "up: $(sinfo -h -p debug -o '%P %D %t %C')"
    echo "SLURM_CONF=$CONF"
}

# Stops the daemons this script started, by pid, slurmd first; nothing else is touched.
down() {
    local name pid
    for name in slurmd slurmctld munged; do
        alive "$name" || continue
        pid=$(cat "$DIR/pids/$name")
        kill "$pid"
        for _ in $(seq 20); do alive "$name" || break; sleep 0.5; done
        alive "$name" && kill -9 "$pid"
        log "stopped $name (pid $pid)"
        rm -f "$DIR/pids/$name"
    done
}

status() {
    local name
    for name in munged slurmctld slurmd; do
        if alive "$name"; then echo "$name: running (pid $(cat "$DIR/pids/$name"))"; else echo "$name: stopped"; fi
    done
    [ -f "$CONF" ] && SLURM_CONF=$CONF sinfo 2>/dev/null || true
}

case "$ACTION" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) die "usage: $0 up|down|status [DIR]" ;;
esac
