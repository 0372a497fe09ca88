# Sourced by the harness scripts: `port=$(free_port NAME)` picks a loopback port nothing listens
# on (50 random tries in 20000-39999), or prints "NAME: no free port" and fails.
free_port() {
  local candidate
  for _ in $(seq 50); do
    candidate=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "$1: no free port" >&2
  return 1
}
