#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian/Ubuntu machine (as root), then run it.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
# a system Python on Debian 12 / Ubuntu 24.04 refuses global installs without this (PEP 668)
export PIP_BREAK_SYSTEM_PACKAGES=1

apt-get update
# fio: storage tests; openssh-server/-client + iproute2 + util-linux (unshare, mount): the
# namespace cluster; tar: file copies over SSH; slurm-wlm + munge: the local Slurm cluster;
# infiniband-diags + rdma-core: what `clustereval run` installs on a node that lacks them; tcsh: the
# login shell of one node of the 4-node bed (tests/test_login_shell.py)
apt-get install -y --no-install-recommends fio openssh-server openssh-client iproute2 util-linux procps tar \
    ca-certificates slurm-wlm munge infiniband-diags rdma-core openssl tcsh
# kubectl: the access = "kubectl" tests run the real client against a stand-in API server; they need
# 1.31 or newer (WebSocket exec) and skip with the reason on Debian's older kubernetes-client
if ! command -v kubectl >/dev/null 2>&1; then
    apt-get install -y --no-install-recommends kubernetes-client || true
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
    apt-get install -y --no-install-recommends python3 python3-pip
fi

python3 -m pip install torch==2.13.0 numpy "scipy>=1.10" matplotlib pytest pytest-timeout pytest-xdist==3.8.0 ruff mypy==1.13.0 xmlschema
python3 -m pip install -e .

ruff check .
# the package's and the tests' byte code, written once: the suite starts some thousand Python
# processes that import them, and where PYTHONDONTWRITEBYTECODE is set each would compile what it
# imports again (a fifth of the CPU of the tests that run the CLI)
python3 -m compileall -q clustereval tests >/dev/null
# mypy (the settings are pyproject.toml's [tool.mypy]) type-checks beside the tests, not before them:
# its half minute of one core then shares the cores with them instead of holding up their start.
# Its output comes after pytest's; either failing fails the command
mypy_log="$(mktemp)"
python3 -m mypy clustereval >"$mypy_log" 2>&1 &
mypy_pid=$!
# two pytest-xdist workers more than the cores: a test that waits (on a node's start-up, a timeout,
# a rate-limited link) leaves its core to the extra workers; tests that share a run or this machine's
# ports stay in one worker (tests/conftest.py, xdist_groups). Then the 20 test phases that cost the
# most CPU (on two cores the suite is bound by CPU: tests/cputime.py), the 20 slowest, and pytest's
# last line: the counts and the total time
pytest_rc=0
python3 -m pytest -q -n "$(( $(nproc) + 2 ))" --dist loadgroup --cpu-top=20 --durations=20 || pytest_rc=$?
mypy_rc=0
wait "$mypy_pid" || mypy_rc=$?
echo "mypy:"
cat "$mypy_log"
rm -f "$mypy_log"
if [ "$mypy_rc" -ne 0 ]; then
    exit "$mypy_rc"
fi
exit "$pytest_rc"
