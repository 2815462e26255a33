# Sourced by the device scripts: the wheels the GPU image lacks, the environment, and the carried
# cache imported into /tmp/pc (SKWGRAD_CACHE, which the end-to-end calls open). $1: the cache export.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKWGRAD_CACHE=/tmp/pc
t0=$(date +%s)
rm -rf /tmp/pc; python3 -m skwgrad cache import "$1" --cache /tmp/pc | tail -1
