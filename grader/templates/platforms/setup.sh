#!/usr/bin/env bash
# Installs the course's grader where a grading platform builds its image: Gradescope runs this file
# of autograder.zip once, as root, on its Ubuntu base image; the PrairieLearn image's Dockerfile runs it
# the same way. What it makes (grader/platforms/__init__.py):
#   /opt/course/venv     Python 3.11 with the course's pinned packages, CPU PyTorch (readable by all)
#   /opt/course/cache    the nbgrader course every submission is graded in (root's alone)
#   course-kernel        the unprivileged user a kernel runs as where bubblewrap cannot run
set -euo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COURSE="$BUNDLE/course"
VENV="${COURSE_VENV:-/opt/course/venv}"  # another only where an environment is made already (the tests)
CACHE=/opt/course/cache
KERNEL_USER=course-kernel

apt_install() {
    command -v apt-get >/dev/null || return 1
    [ -n "${APT_UPDATED:-}" ] || { apt-get update -qq && APT_UPDATED=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
missing=()
command -v python3.11 >/dev/null || missing+=(python3.11 python3.11-venv)
command -v useradd >/dev/null || missing+=(passwd)
if ((${#missing[@]})) && ! apt_install "${missing[@]}"; then
    echo "setup.sh: install ${missing[*]} first (Gradescope: choose the Ubuntu 22.04 base image)" >&2
    exit 1
fi
# Without bubblewrap (or where the container denies it) kernels run as $KERNEL_USER instead.
command -v bwrap >/dev/null || apt_install bubblewrap || echo "setup.sh: bubblewrap is not installed" >&2
command -v python3.11 >/dev/null || { echo "setup.sh: Python 3.11 could not be installed" >&2; exit 1; }

[ "$VENV" = /opt/course/venv ] || { mkdir -p /opt/course && ln -sfn "$VENV" /opt/course/venv; }
if [ ! -x "$VENV/bin/python" ]; then
    python3.11 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
fi
# The pins the course is tested with; PyTorch's CPU build (pip prefers 2.13.0+cpu to PyPI's CUDA build).
"$VENV/bin/pip" install --quiet --extra-index-url https://download.pytorch.org/whl/cpu \
    -r "$COURSE/requirements.lock"

id -u "$KERNEL_USER" >/dev/null 2>&1 \
    || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$KERNEL_USER"

mkdir -p "$CACHE"
chmod 700 "$CACHE"
if [ -d "$COURSE/solutions" ]; then  # Gradescope's; PrairieLearn's jobs bring the course (serverFilesCourse)
    # The nbgrader course, generated now rather than for every submission (8 s).
    XDG_CACHE_HOME="$CACHE" PYTHONPATH="$COURSE" "$VENV/bin/python" -m grader.platforms.run prepare
fi
# Each run makes the course root's alone but for its checks package (grader/platforms/run.py, lock).
echo "setup.sh: the grader is installed"
