# Sourced by ./dev test: provide a PostgreSQL server for the tests that need one and
# export TFINPUT_TEST_POSTGRES_URL. Uses an existing URL if set; otherwise starts a
# throwaway server on loopback (installing Debian's postgresql package if needed and
# allowed: root, or CI=true). Without one, the PostgreSQL tests are skipped with a reason.
if [ -z "${TFINPUT_TEST_POSTGRES_URL:-}" ]; then
  pg_bin=""
  for d in /usr/lib/postgresql/*/bin /usr/local/bin /usr/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then pg_bin="$d"; break; fi
  done
  if [ -z "$pg_bin" ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "dev: installing PostgreSQL (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2 \
      || echo "dev: could not install PostgreSQL; its tests will be skipped" >&2
    for d in /usr/lib/postgresql/*/bin; do
      if [ -x "$d/initdb" ]; then pg_bin="$d"; fi
    done
  fi
  if [ -n "$pg_bin" ]; then
    pg_dir=$(mktemp -d /tmp/tfinput-pg.XXXXXX)
    # A free loopback port (another server, or a previous run's, may hold a fixed one).
    pg_port=${TFINPUT_TEST_PG_PORT:-$("${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
    run_as=()
    if [ "$(id -u)" = "0" ]; then
      id postgres >/dev/null 2>&1 || useradd -r -M postgres 2>/dev/null || true
      chown -R postgres "$pg_dir"
      run_as=(runuser -u postgres --)
    fi
    if "${run_as[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U tfinput --auth=trust >/dev/null \
      && "${run_as[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w \
           -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1" start >/dev/null; then
      export TFINPUT_TEST_POSTGRES_URL="postgresql://tfinput@127.0.0.1:$pg_port/postgres"
      # Stop the server when the test run ends (exec keeps this shell's trap via a
      # watcher process).
      ( while kill -0 $$ 2>/dev/null; do sleep 2; done
        "${run_as[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast stop >/dev/null 2>&1
        rm -rf "$pg_dir" ) &
      echo "dev: PostgreSQL on 127.0.0.1:$pg_port for the tests" >&2
    else
      echo "dev: PostgreSQL did not start (see $pg_dir/log); its tests will be skipped" >&2
    fi
  fi
  if [ -z "${TFINPUT_TEST_POSTGRES_URL:-}" ] && [ "${CI:-}" = "true" ]; then
    echo "dev: CI needs PostgreSQL for the multi-worker tuner test, and none could be started" >&2
    exit 1
  fi
fi
