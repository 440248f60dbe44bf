#!/usr/bin/env bash
# Installs the course's grader where a grading platform builds its image: Gradescope runs this file
# of autograder.zip once, as root, on its Ubuntu base image; the PrairieLearn image's Dockerfile runs it
# the same way. What it makes (grader/platforms/__init__.py):
#   /opt/course/venv     Python 3.11 with the course's pinned packages, CPU PyTorch (readable by all)
#   /opt/course/cache    the nbgrader course every submission is graded in (root's alone)
set -euo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COURSE="$BUNDLE/course"
VENV="${COURSE_VENV:-/opt/course/venv}"  # another only where an environment is made already (the tests)
CACHE=/opt/course/cache

apt_install() {
    command -v apt-get >/dev/null || return 1
    [ -n "${APT_UPDATED:-}" ] || { apt-get update -qq && APT_UPDATED=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
if ! python3.11 -c "import ensurepip" 2>/dev/null; then  # Python 3.11 with its venv module
    apt_install python3.11 python3.11-venv || {
        echo "setup.sh: install python3.11 and python3.11-venv first (Gradescope: the Ubuntu 22.04 image)" >&2
        exit 1
    }
fi
# Without bubblewrap (or where the container denies it) a kernel runs as a user of its own instead.
command -v bwrap >/dev/null || apt_install bubblewrap || echo "setup.sh: bubblewrap is not installed" >&2

[ "$VENV" = /opt/course/venv ] || { mkdir -p /opt/course && ln -sfn "$VENV" /opt/course/venv; }
if [ ! -x "$VENV/bin/python" ]; then
    python3.11 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
fi
# The pins the course is tested with; PyTorch's CPU build (pip prefers 2.13.0+cpu to PyPI's CUDA build).
"$VENV/bin/pip" install --quiet --extra-index-url https://download.pytorch.org/whl/cpu \
    -r "$COURSE/requirements.lock"

mkdir -p "$CACHE"
chmod 700 "$CACHE"
if [ -d "$COURSE/solutions" ]; then  # Gradescope's; PrairieLearn's jobs bring the course (serverFilesCourse)
    # The nbgrader course, generated now rather than for every submission (8 s).
    XDG_CACHE_HOME="$CACHE" PYTHONPATH="$COURSE" "$VENV/bin/python" -P -m grader.platforms.run prepare
fi
# Each run makes the course root's alone but for its checks package (grader/platforms/run.py, lock).
echo "setup.sh: the grader is installed"
