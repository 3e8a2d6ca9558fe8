# Sourced by tests that take a DEVICE: when $device is set and tp-run cannot
# use it (no GPU, no driver, a build without CUDA), prints why and exits 77,
# which ctest reports as skipped.
if [ -n "${device:-}" ]; then
  why=$("$bin/tp-run" /nonexistent.tpplan --data /nonexistent --device "$device" 2>&1 || true)
  case "$why" in
    *"--device $device:"*)
      echo "skipped: ${why#tp-run: error: }"
      exit 77 ;;
  esac
fi
