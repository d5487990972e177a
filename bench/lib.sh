# What the benchmark scripts share; sourced, never run.

# bench_work: a new work directory in $work, under $ROOTS when it is set,
# else in the temporary directory; and $under_tmp, yes when it lies in the
# temporary directory the steps are given: the costlier confinement (that
# directory is granted entry by entry around the root, and each step gets
# a private one in its run directory).
bench_work() {
  if [ -n "${ROOTS:-}" ]; then work=$(mktemp -d -p "$ROOTS"); else work=$(mktemp -d); fi
  local tmp_dir
  tmp_dir=$(realpath "${TMPDIR:-/tmp}")
  case "$(realpath "$work")/" in "$tmp_dir"/*) under_tmp=yes ;; *) under_tmp=no ;; esac
}

# loop_toml KIND [EVERY]: the config of a loop whose step is `true`. KIND is
# gated (one stock gate, the step confined), gateless (no gate) or
# unconfined (no gate, `confine = "off"`); EVERY (`10s`) adds a schedule.
loop_toml() {
  case $1 in
    gated) printf 'step = ["true"]\n[[gate]]\nstock = "max-failures"\nparams = { max = 3 }\n' ;;
    gateless) printf 'step = ["true"]\n' ;;
    unconfined) printf '[step]\ncommand = ["true"]\nconfine = "off"\n' ;;
    *) echo "a loop is gated, gateless or unconfined, not ${1:-nothing}" >&2; return 2 ;;
  esac
  [ -z "${2:-}" ] || printf '[schedule]\nevery = "%s"\n' "$2"
}
