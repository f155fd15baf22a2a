#!/bin/bash
# Entrypoint of the hai-slurm testbed image: starts one role's daemons, the last one in the
# foreground (so the container lives as long as it does). Usage:
#   hai-testbed-entrypoint controller | database | compute NODENAME | sleep
# docker_mode.py copies /etc/slurm/* and /etc/munge/munge.key into the container before it starts.
set -euo pipefail
role=${1:-}
conf_dir=/etc/slurm

die() { echo "hai-testbed-entrypoint ($role): error: $*" >&2; exit 1; }
say() { echo "$(date +%T.%3N) $role: $*"; }

# Value of KEY=VALUE in a Slurm-style config file (first match, surrounding spaces dropped).
conf_value() { sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*//p" "$1" | head -n 1 | sed 's/[[:space:]]*$//'; }

start_munged() {
  local key=/etc/munge/munge.key
  [ -s "$key" ] || die "no munge key at $key (the orchestrator copies it in before start)"
  chown munge:munge "$key"; chmod 0400 "$key"
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged || die "munged did not start; see /var/log/munge/munged.log"
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "munged does not answer (munge -n failed for 5 s)"
}

make_dirs() {
  # Directories the rendered configs point at (fixed paths of the Docker layout).
  mkdir -p /var/log/slurm /var/spool/slurmctld /var/spool/slurmd /run/slurm
}

case "$role" in
  controller)
    [ -s "$conf_dir/slurm.conf" ] || die "no $conf_dir/slurm.conf"
    make_dirs; start_munged
    # Redis for the priority daemon; reachable by other containers on the testbed network only,
    # with the password of /etc/hai-slurm/redis.conf (copied in by the orchestrator, mode 0600).
    [ -s /etc/hai-slurm/redis.conf ] || die "no /etc/hai-slurm/redis.conf"
    redis-server /etc/hai-slurm/redis.conf --daemonize yes --logfile /var/log/slurm/redis.log \
      || die "redis-server did not start"
    say "munged and redis up; starting slurmctld"
    exec slurmctld -D -f "$conf_dir/slurm.conf"
    ;;
  database)
    dbd_conf=$conf_dir/slurmdbd.conf
    [ -s "$dbd_conf" ] || die "no $dbd_conf"
    chmod 0600 "$dbd_conf"
    make_dirs; start_munged
    user=$(conf_value "$dbd_conf" StorageUser); pass=$(conf_value "$dbd_conf" StoragePass)
    db=$(conf_value "$dbd_conf" StorageLoc)
    [ -n "$user" ] && [ -n "$pass" ] && [ -n "$db" ] \
      || die "$dbd_conf lacks StorageUser, StoragePass or StorageLoc"
    say "munged up; starting mariadbd"
    mkdir -p /run/mysqld; chown mysql:mysql /run/mysqld
    if [ ! -d /var/lib/mysql/mysql ]; then
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/var/log/slurm/mariadb-install.log 2>&1 \
        || die "mariadb-install-db failed; see /var/log/slurm/mariadb-install.log"
    fi
    mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
      --pid-file=/run/mysqld/mysqld.pid --bind-address=127.0.0.1 --port=3306 \
      --skip-log-bin >/var/log/slurm/mariadb.log 2>&1 &
    for _ in $(seq 300); do
      mariadb-admin --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1 && break
      kill -0 $! 2>/dev/null || die "mariadbd exited; see /var/log/slurm/mariadb.log"
      sleep 0.1
    done
    mariadb-admin --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1 \
      || die "mariadbd does not answer after 30 s; see /var/log/slurm/mariadb.log"
    say "mariadbd answers; creating database $db and user $user"
    mariadb --socket=/run/mysqld/mysqld.sock <<SQL
CREATE DATABASE IF NOT EXISTS \`$db\`;
CREATE USER IF NOT EXISTS '$user'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON \`$db\`.* TO '$user'@'localhost';
SQL
    say "starting slurmdbd"
    exec slurmdbd -D
    ;;
  compute)
    node=${2:-}
    [ -n "$node" ] || die "usage: compute NODENAME"
    [ -s "$conf_dir/slurm.conf" ] || die "no $conf_dir/slurm.conf"
    make_dirs; start_munged
    say "$node: munged up; starting slurmd"
    exec slurmd -D -N "$node" -f "$conf_dir/slurm.conf"
    ;;
  sleep)
    # For debugging an image by hand: docker run -it --rm IMAGE sleep
    exec sleep infinity
    ;;
  *)
    die "unknown role '$role' (controller, database, compute NODENAME, sleep)"
    ;;
esac
