#include "tpc/runtime/Backend.h"

#ifdef TPC_HAVE_CUDA
#include "cuda/CudaBackend.h"
#endif

#include <cblas.h>

#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <thread>

namespace tpc::runtime {

void Backend::uploadRows(std::byte *device, uint64_t rowBytes,
                         std::span<const int64_t> rows, const void *host) {
  const auto *packed = static_cast<const std::byte *>(host);
  for (size_t i = 0; i < rows.size(); ++i)
    upload(device + uint64_t(rows[i]) * rowBytes, packed + i * rowBytes,
           rowBytes);
}

void Backend::downloadRows(void *host, const std::byte *device,
                           uint64_t rowBytes, std::span<const int64_t> rows) {
  auto *packed = static_cast<std::byte *>(host);
  for (size_t i = 0; i < rows.size(); ++i)
    download(packed + i * rowBytes, device + uint64_t(rows[i]) * rowBytes,
             rowBytes);
}

std::string Backend::collectivePath() const {
  return hostVisible() ? "MPI on host memory" : "MPI staged through the host";
}

std::string Backend::kernelLibraries() const {
  return std::string("products: OpenBLAS (") + openblas_get_corename() +
         "); the rest: tpc's kernels";
}

DeviceDescription hostDescription() {
  DeviceDescription host;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string model = "CPU";
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      if (size_t colon = line.find(':'); colon != std::string::npos)
        model = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  host.cores = int(std::thread::hardware_concurrency());
  host.name = model + " (" + std::to_string(host.cores) + " cores)";
  host.memoryBytes =
      uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
  return host;
}

std::vector<std::string> deviceNames() {
  std::vector<std::string> built;
  for (std::string_view name : kDeviceNames) {
#ifndef TPC_HAVE_CUDA
    if (name == "cuda")
      continue;
#endif
    built.emplace_back(name);
  }
  return built;
}

Backend &deviceBackend(std::string_view name, int ordinal) {
  if (name == "cpu")
    return cpuBackend();
  if (name == "staged-cpu")
    return stagedTestBackend();
  if (name == "cuda") {
#ifdef TPC_HAVE_CUDA
    if (std::string why = cudaUnavailable(); !why.empty())
      throw std::invalid_argument("--device cuda: " + why);
    return cudaBackend(ordinal);
#else
    (void)ordinal;
    throw std::invalid_argument("--device cuda: this tp-run was built without "
                                "the CUDA toolkit");
#endif
  }
  std::string known;
  for (const std::string &device : deviceNames())
    known += (known.empty() ? "" : ", ") + device;
  throw std::invalid_argument("--device: unknown device '" + std::string(name) +
                              "' (this build has " + known + ")");
}

std::string defaultDevice() {
#ifdef TPC_HAVE_CUDA
  if (cudaUnavailable().empty())
    return "cuda";
#endif
  return "cpu";
}

} // namespace tpc::runtime
