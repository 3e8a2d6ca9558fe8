// Child processes of the scheduler: the compiler's tools, run to the end,
// and training segments (mpirun ... tp-run) started in a session of their
// own, so that every process of a segment, ranks included, can be found and
// stopped even by a scheduler restarted after a crash.
#pragma once

#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace tpc::sched {

struct CommandResult {
  int exitCode = 0;   // 128 + signal when killed
  std::string output; // stdout and stderr, interleaved
};

/// A wait status as a shell reports it: the exit code, or 128 + signal.
int exitCodeOf(int status);

/// Runs argv[0] (looked up in PATH) to its end.
CommandResult runCommand(const std::vector<std::string> &argv);

/// Starts argv in a new session (setsid) with stdout and stderr appended to
/// `logPath` and `environment` (NAME=VALUE) added to this process's;
/// returns its pid (also its session and process group id). Throws
/// std::runtime_error when it cannot start.
pid_t startSession(const std::vector<std::string> &argv,
                   const std::vector<std::string> &environment,
                   const std::string &logPath);

/// The pids of the live processes of session `sid` (from /proc).
std::vector<pid_t> sessionProcesses(pid_t sid);

/// Stops every process of session `sid`: SIGTERM, then SIGKILL to those
/// left after `graceSeconds`; returns once none is left (reaping the
/// session leader when it is this process's child).
void stopSession(pid_t sid, double graceSeconds = 5);

/// A shell-quoted command line, for logs and replay scripts.
std::string shellLine(const std::vector<std::string> &argv);

} // namespace tpc::sched
