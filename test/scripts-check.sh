#!/usr/bin/env bash
# scripts-check.sh ROOT - the scripts CI never runs (the GPU rounds, the
# benchmarks' drivers, the examples for the GPU machine) at least parse:
# bash -n and shellcheck (warnings and above) on every shell script,
# py_compile on every Python file. Exit status 1 on the first kind of
# problem found, with the messages.
set -uo pipefail
root=${1:?usage: scripts-check.sh ROOT}
cd "$root" || exit 1
fails=0
mapfile -t shells < <(git ls-files '*.sh' 2>/dev/null || find . -name '*.sh' -not -path './build*')
mapfile -t pys < <(git ls-files '*.py' 2>/dev/null || find . -name '*.py' -not -path './build*')
((${#shells[@]} && ${#pys[@]})) || { echo "scripts-check: no scripts found under $root" >&2; exit 1; }
for f in "${shells[@]}"; do
  bash -n "$f" || { echo "scripts-check: $f does not parse"; fails=$((fails + 1)); }
done
if command -v shellcheck >/dev/null; then
  shellcheck -S warning "${shells[@]}" || fails=$((fails + 1))
else
  echo "scripts-check: no shellcheck: bash -n only"
fi
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
PYTHONPYCACHEPREFIX=$cache python3 - "${pys[@]}" <<'PY' || fails=$((fails + 1))
import py_compile, sys
bad = 0
for f in sys.argv[1:]:
    try:
        py_compile.compile(f, doraise=True)
    except py_compile.PyCompileError as e:
        print(f"scripts-check: {e.msg}")
        bad += 1
sys.exit(1 if bad else 0)
PY
echo "scripts-check: ${#shells[@]} shell scripts, ${#pys[@]} Python files; problems: $fails"
exit $((fails != 0))
