#!/bin/sh
# Start the local PostgreSQL cluster, make a login role for the current user and a
# zuno_test database (each step idempotent), then print the connection string
# for ZUNO_TEST_POSTGRES. Run as root (Debian's postgresql packages).
set -eu
# Only the connection string goes to stdout: what the tools say goes to stderr.
version=$(ls /etc/postgresql | sort -n | tail -1)
pg_ctlcluster "$version" main start >/dev/null 2>&1 || pg_ctlcluster "$version" main status >/dev/null
user=$(id -un)
db=${ZUNO_TEST_DB:-zuno_test}
for _ in 1 2 3 4 5 6 7 8 9 10; do
  su postgres -c "pg_isready -q" && break
  sleep 1
done
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname = '$user'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE ROLE \\\"$user\\\" SUPERUSER LOGIN\"" >&2
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname = '$db'\"" | grep -q 1 ||
  su postgres -c "createdb -O \"$user\" \"$db\"" >&2
echo "postgresql://$user@/$db"
