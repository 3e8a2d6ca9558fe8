// tpc-calibrate: measures this machine (or these machines) and writes a
// cluster file for the step simulator (docs/simulator.md).
//
//   mpirun -np 2 tpc-calibrate -o clusters/this-machine.json
//   mpirun -np 8 tpc-calibrate -o dgx.json --device cuda --name dgx-h100
//
// Every rank runs it with the same options; rank 0 writes the file
// (atomically, after checking it can before anything is measured). Errors
// are one line on stderr and exit code 1.

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Calibration.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/SanitizerDefaults.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <ctime>
#include <functional>
#include <iostream>
#include <string>

using namespace tpc::runtime;

// An MPI program: OpenMPI's own allocations outlive MPI_Finalize.
TPC_ASAN_DEFAULT_OPTIONS(":detect_leaks=0")

namespace {
std::string today() {
  const std::time_t t = std::time(nullptr);
  char text[16];
  std::strftime(text, sizeof(text), "%Y-%m-%d", std::gmtime(&t));
  return text;
}
} // namespace

int main(int argc, char **argv) {
  std::string output, device;
  int threads = 0;
  CalibrationOptions options;
  CLI::App app(
      "Measures the machine for the step simulator: matrix products per "
      "shape and precision, how fast other kernels stream memory, the fixed "
      "cost of a kernel (world rank 0 on its device), and the latency and "
      "bandwidth of each network level between the ranks (at least 2, "
      "placed in order, as many per machine); writes a cluster file.",
      "tpc-calibrate");
  app.add_option("-o,--output", output, "The cluster file to write")
      ->required();
  app.add_option("--name", options.name, "The cluster's name in the file")
      ->capture_default_str();
  app.add_option("--device", device,
                 "Backend whose kernels and channel are measured (default: "
                 "cuda when a GPU is visible, else cpu)")
      ->check(CLI::IsMember(deviceNames()));
  app.add_option("--threads", threads,
                 "Kernel threads of the CPU (0: every core)")
      ->check(CLI::Range(0, cpu::maxThreads()));
  app.add_option("--seconds-per-point", options.secondsPerPoint,
                 "How long each size is repeated (its median run counts)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  app.add_flag("--quick", options.quick,
               "Small problems only, in seconds (tests; not a file to "
               "predict with)");
  Comm &world = Comm::world();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    if (world.rank() == 0)
      std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError &error) {
    std::cerr << "tpc-calibrate: error: " << error.what() << "\n";
    return 1;
  }
  try {
    runTogether(world, [&] {
      if (world.rank() == 0)
        checkWritableFile(output, "-o");
    });
    // Every rank must measure the same thing.
    std::string agreed = options.name + "\n" + device + "\n" +
                         std::to_string(options.secondsPerPoint) + "\n" +
                         std::to_string(options.quick);
    if (!world.allEqual(std::hash<std::string>{}(agreed))) {
      if (world.rank() == 0)
        throw std::runtime_error("the ranks were given different options");
      throw AnotherRankFailed();
    }
    if (threads)
      cpu::setNumThreads(threads);
    Backend &backend = deviceBackend(device.empty() ? defaultDevice() : device,
                                     machineLocalRank());
    const MachineCalibration calibration =
        calibrateMachine(backend, world, options);
    if (world.rank() == 0) {
      writeFileAtomically(output,
                          calibration.clusterJson(today()).dump(2) + "\n");
      std::cout << "wrote " << output << "\n";
    }
  } catch (const AnotherRankFailed &) {
    return 1; // that rank's error says why
  } catch (const std::exception &e) {
    std::cerr << "tpc-calibrate: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
