#!/usr/bin/env bash
# A real SLURM cluster on this machine, for the slow tests and for trying hydra/launcher=slurm: Debian's
# slurm-wlm (slurmctld, slurmd, slurmdbd with a local MariaDB for sacct) and munge, started directly (no
# systemd, no cgroups) and stopped by PID.
#
#   bash tests/slurm/cluster.sh up            # as root: install (first time, ~50 s), configure, start
#   bash tests/slurm/cluster.sh up --nodes 2  # two slurmd on this machine: multi-node jobs (DDP over gloo)
#   bash tests/slurm/cluster.sh down          # stop every daemon it started
#   bash tests/slurm/cluster.sh status        # sinfo, or why not
#
# One node: this machine, its CPUs and memory as `slurmd -C` reads them, in one partition `debug` (the
# default, no time limit). --nodes 2: nodes ablate-n1 and ablate-n2 (names added to /etc/hosts for
# 127.0.0.1), each with this machine's CPUs and half its memory, so the two share the CPUs. Accounting is on
# because submitit polls sacct: without it a job that died without writing its output is waited for
# forever. Writes /etc/slurm/{slurm,slurmdbd}.conf only where no other slurm.conf is there (a real
# cluster's node is never touched). A cold `up`, or one with another --nodes, starts on a clean state (no
# jobs, job ids and accounting from 1).
set -euo pipefail

STATE=/var/lib/ablate-slurm   # pid files, logs, spool folders, the daemons' temporary files
# The daemons run as their own users (mysql, slurm, munge): the caller's TMPDIR may be a folder only the
# caller can write (MariaDB then fails with Errcode 13), so no daemon inherits it; MariaDB writes its
# temporary files in a folder of its own under STATE.
unset TMPDIR
MARK="# written by ablate tests/slurm/cluster.sh"
CLUSTER=ablate
PARTITION=debug
# slurmdbd's own MariaDB user and database (socket only, test only): named for this script, so that another
# SLURM set-up's 'slurm' user or slurm_acct_db on the same server is never used nor changed; the password is
# set at every start, so a user left by an older run of this script cannot refuse slurmdbd
DB_USER=ablate_slurm
DB_NAME=ablate_slurm_acct_db
DB_PASS=ablate-slurm-test
DB_PID=/run/mysqld/ablate-slurm.pid
NODES=1
RESET_DB=0

log() { echo "[slurm-cluster] $*"; }
die() { echo "[slurm-cluster] error: $*" >&2; exit 1; }

install_packages() {
    local need=()
    for bin in slurmctld slurmd slurmdbd sbatch munged mariadbd; do
        command -v "$bin" >/dev/null 2>&1 || need+=("$bin")
    done
    [ ${#need[@]} -eq 0 ] && return
    log "installing Debian packages (missing: ${need[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurmctld slurmd slurmdbd slurm-client munge mariadb-server >/dev/null
}

node_lines() {  # the NodeName lines: this machine, or $NODES slurmd on it
    local hw mem i
    hw=$(slurmd -C | head -1)   # NodeName=<host> CPUs=.. Boards=.. ... RealMemory=..
    if [ "$NODES" -eq 1 ]; then echo "$hw"; return; fi
    mem=$(( ${hw##*RealMemory=} / NODES ))
    hw=${hw#NodeName=* }        # CPUs=.. ... RealMemory=..
    for i in $(seq "$NODES"); do
        echo "NodeName=ablate-n$i NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 Port=$((17000 + i))" \
            "${hw%RealMemory=*}RealMemory=$mem"
    done
}

node_names() { node_lines | sed -E 's/^NodeName=([^ ]+).*/\1/'; }

slurm_conf() {
    cat <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)
SlurmUser=slurm
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
# a requeued job waits cred_expire seconds before it may start again (default 120 s; 10 keeps tests short)
AuthInfo=cred_expire=10
MinJobAge=300
SchedulerParameters=sched_interval=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$(node_lines)
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

slurmdbd_conf() {
    cat <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
EOF
}

write_configs() {
    if [ -f /etc/slurm/slurm.conf ] && ! grep -qF "$MARK" /etc/slurm/slurm.conf; then
        die "/etc/slurm/slurm.conf exists and is not this script's: refusing to touch a real cluster's node"
    fi
    mkdir -p /etc/slurm "$STATE"/{ctld,d,log}
    chown slurm:slurm "$STATE/ctld"
    local new
    new=$(slurm_conf)
    if [ "$new" != "$(cat /etc/slurm/slurm.conf 2>/dev/null)" ]; then  # another layout: a clean restart
        stop_slurm
        stop "$STATE/slurmdbd.pid"
        rm -rf "${STATE:?}"/ctld/*
        RESET_DB=1  # job ids start again at 1: old accounting rows with the same ids would mislead sacct
        echo "$new" >/etc/slurm/slurm.conf
    fi
    slurmdbd_conf >/etc/slurm/slurmdbd.conf
    chown slurm:slurm /etc/slurm/slurmdbd.conf
    chmod 600 /etc/slurm/slurmdbd.conf
    if [ "$NODES" -gt 1 ]; then
        for n in $(node_names); do
            getent hosts "$n" >/dev/null || echo "127.0.0.1 $n  $MARK" >>/etc/hosts
        done
    fi
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

wait_for() {  # wait_for <seconds> <what> <command...>
    local n=$1 what=$2; shift 2
    for _ in $(seq $((n * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    die "$what did not come up within ${n} s (logs in $STATE/log)"
}

stop() {  # stop <pid file>...
    local pid
    for pid in "$@"; do
        if running "$pid"; then
            kill "$(cat "$pid" 2>/dev/null)" 2>/dev/null || true
            for _ in $(seq 50); do running "$pid" || break; sleep 0.2; done
        fi
    done
}

stop_slurm() { stop "$STATE"/slurmd-*.pid "$STATE/slurmctld.pid"; }

start_munge() {
    running /run/munge/munged.pid && return
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    wait_for 10 munged munge -n
}

start_mariadb() {
    if ! running "$DB_PID"; then
        mkdir -p /run/mysqld "$STATE/tmp/mariadb" && chown mysql:mysql /run/mysqld "$STATE/tmp/mariadb"
        mariadbd --user=mysql --pid-file="$DB_PID" --tmpdir="$STATE/tmp/mariadb" --skip-networking \
            >"$STATE/log/mariadb.log" 2>&1 &
        wait_for 30 mariadb mariadb -e "select 1"
    fi
    if [ "$RESET_DB" = 1 ]; then mariadb -e "DROP DATABASE IF EXISTS $DB_NAME;"; fi
    mariadb -e "CREATE DATABASE IF NOT EXISTS $DB_NAME;
        CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
        ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';"
}

nodes_up() { [ "$(sinfo -h -N -o %t | grep -cE '^(idle|mix|alloc)')" -eq "$NODES" ]; }

start_slurm() {
    running "$STATE/slurmdbd.pid" || slurmdbd
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
    running "$STATE/slurmctld.pid" || slurmctld
    for n in $(node_names); do
        mkdir -p "$STATE/d/$n"
        running "$STATE/slurmd-$n.pid" || slurmd -N "$n"
    done
    wait_for 30 "the nodes" nodes_up
}

status() { sinfo -h -o '%P %D node(s), %c CPUs and %m MB a node, %t' 2>&1; }

up() {
    [ "$(id -u)" -eq 0 ] || die "needs root (installs Debian packages and starts daemons)"
    install_packages
    if ! running "$STATE/slurmctld.pid"; then  # a cold start: no jobs of an earlier life linger
        stop "$STATE/slurmdbd.pid"
        rm -rf "${STATE:?}"/ctld/*
        RESET_DB=1
    fi
    write_configs
    start_munge
    start_mariadb
    start_slurm
    log "up: $(status)"
}

down() {
    stop_slurm
    stop "$STATE/slurmdbd.pid" "$DB_PID" /run/munge/munged.pid
    log "down"
}

cmd=${1:-}
if [ "${2:-}" = "--nodes" ]; then NODES=${3:?--nodes needs a number}; fi
case "$cmd" in
    up) up ;;
    down) down ;;
    status) status || exit 1 ;;
    *) echo "usage: $0 up [--nodes N] | down | status" >&2; exit 2 ;;
esac
