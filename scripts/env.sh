# Sourced by the scripts: run-time settings for this kind of machine.
# OpenBLAS 0.3.21 does not recognise recent CPUs (Intel family 6 model 207, AMD family 26) and
# falls back to a generic kernel, about 5x slower; the SkylakeX kernel suits any CPU with AVX-512.
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
# mpirun refuses to run as root (CI containers) unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
