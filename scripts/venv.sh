# Sourced by scripts/serve and scripts/test: a virtual environment in the checkout,
# created once and reinstalled only when pyproject.toml (or the extras asked for) changed.
#
#   CHATGQL_PYTHON  the interpreter to build it with (default: the first python3 >= 3.11
#                   on PATH: python3, python3.13, python3.12, python3.11)
#   CHATGQL_VENV    where it lives (default: .venv in the checkout)
#
# A distribution's python3 that lacks venv/ensurepip (Debian and Ubuntu without
# python3-venv) gets python3.X-venv from apt (sudo when not root).

apt_install() {
  local sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "scripts: installing $* with apt-get" >&2
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade "$@" >/dev/null
}

_python_is_recent() {
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

_pick_python() {
  if [ -n "${CHATGQL_PYTHON:-}" ]; then
    _python_is_recent "$CHATGQL_PYTHON" || { echo "scripts: CHATGQL_PYTHON=$CHATGQL_PYTHON is not a Python 3.11 or later" >&2; return 1; }
    echo "$CHATGQL_PYTHON"
    return
  fi
  local candidate
  for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 && _python_is_recent "$candidate"; then
      echo "$candidate"
      return
    fi
  done
  echo "scripts: chatgql needs Python 3.11 or later: none found on PATH (set CHATGQL_PYTHON)" >&2
  return 1
}

_create_venv() {  # _create_venv PYTHON DIR
  local py="$1" dir="$2"
  if ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
    local version
    version=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    if ! command -v apt-get >/dev/null 2>&1; then
      echo "scripts: $py cannot create virtual environments (no venv/ensurepip); install its venv package" >&2
      return 1
    fi
    apt_install "python$version-venv"
  fi
  echo "scripts: creating $dir with $("$py" -c 'import sys; print(sys.executable)')" >&2
  "$py" -m venv --clear "$dir"
}

# ensure_venv EXTRAS: sets VENV_PYTHON; EXTRAS like "" or "test,redis". One script at a
# time (serve and test started together on a fresh checkout would both install).
ensure_venv() {
  local lock status=0
  exec {lock}<pyproject.toml
  if command -v flock >/dev/null 2>&1; then flock "$lock"; fi
  _ensure_venv "$@" || status=$?  # (errexit is off in there: failures return 1 explicitly)
  exec {lock}<&-  # not inherited by the server or pytest
  return $status
}

_ensure_venv() {
  local extras="$1" dir="${CHATGQL_VENV:-.venv}" stamp py base want have="" reason=""
  case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
  stamp="$dir/.chatgql-installed"
  if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c '' 2>/dev/null; then
    base=$(sed -n 's/^python=//p' "$stamp" 2>/dev/null || true)
    if [ -n "${CHATGQL_PYTHON:-}" ] && [ "$base" != "$("$CHATGQL_PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)" ]; then
      reason="CHATGQL_PYTHON changed"
    fi
  else
    reason="new"
  fi
  if [ -n "$reason" ]; then
    py=$(_pick_python) || return 1
    _create_venv "$py" "$dir" || return 1
    rm -f "$stamp"
  fi
  base=$("$dir/bin/python" -c 'import os, sys; print(os.path.realpath(sys._base_executable))')
  want=$(sha256sum <pyproject.toml | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(sed -n 's/^pyproject=//p' "$stamp")" = "$want" ]; then
    have=$(sed -n 's/^extras=//p' "$stamp")
    local missing="" extra
    for extra in ${extras//,/ }; do
      case ",$have," in *",$extra,"*) ;; *) missing="$missing $extra" ;; esac
    done
    if [ -z "$missing" ]; then
      VENV_PYTHON="$dir/bin/python"
      return
    fi
    reason="extras$missing"
  else
    [ -f "$stamp" ] && have=$(sed -n 's/^extras=//p' "$stamp")
    reason="${reason:-pyproject.toml changed}"
  fi
  # install what was asked for and what was there before: the venv stays whole
  local all
  all=$(printf '%s\n' ${extras//,/ } ${have//,/ } | sort -u | paste -sd, -)
  echo "scripts: installing chatgql${all:+[$all]} into $dir ($reason)" >&2
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -e ".${all:+[$all]}" || return 1
  printf 'pyproject=%s\nextras=%s\npython=%s\n' "$want" "$all" "$base" >"$stamp"
  VENV_PYTHON="$dir/bin/python"
}
