# shellcheck shell=bash
# wait_ready LOG WHAT PID LOG_FILE TIMEOUT_S CHECK...
# Runs CHECK quietly until it succeeds, every 0.2 s. Exits the calling script, with the end of LOG_FILE, when
# process PID dies first or TIMEOUT_S seconds pass: a daemon that failed is said at once, not after the
# timeout. LOG is the caller's log function (its prefix).
wait_ready() {
  local log=$1 what=$2 pid=$3 logfile=$4 timeout_s=$5
  local deadline=$(($(date +%s) + timeout_s))
  shift 5
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      "$log" "$what: its process exited; the end of its log:"
      tail -n 30 "$logfile" >&2
      exit 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      "$log" "$what not ready after ${timeout_s}s; the end of its log:"
      tail -n 30 "$logfile" >&2
      exit 1
    fi
    sleep 0.2
  done
}
