#include "Process.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <spawn.h>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace tpc::sched {

namespace {

std::vector<char *> pointers(std::vector<std::string> &strings) {
  std::vector<char *> out;
  for (std::string &s : strings)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

} // namespace

int exitCodeOf(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return 1;
}

CommandResult runCommand(const std::vector<std::string> &argv) {
  int fds[2];
  if (::pipe(fds) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<std::string> args = argv;
  std::vector<char *> argp = pointers(args);
  pid_t pid = 0;
  int error =
      posix_spawnp(&pid, argp[0], &actions, nullptr, argp.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  CommandResult result;
  if (error != 0) {
    ::close(fds[0]);
    throw std::runtime_error(argv[0] +
                             ": cannot start: " + std::strerror(error));
  }
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    result.output.append(buffer, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exitCode = exitCodeOf(status);
  return result;
}

pid_t startSession(const std::vector<std::string> &argv,
                   const std::vector<std::string> &environment,
                   const std::string &logPath) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, logPath.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e)
    env.emplace_back(*e);
  for (const std::string &added : environment) {
    const std::string name = added.substr(0, added.find('=') + 1);
    std::erase_if(env, [&](const std::string &e) {
      return e.compare(0, name.size(), name) == 0;
    });
    env.push_back(added);
  }
  std::vector<std::string> args = argv;
  std::vector<char *> argp = pointers(args), envp = pointers(env);
  pid_t pid = 0;
  int error = posix_spawnp(&pid, argp[0], &actions, &attributes, argp.data(),
                           envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0)
    throw std::runtime_error(argv[0] +
                             ": cannot start: " + std::strerror(error));
  return pid;
}

std::vector<pid_t> sessionProcesses(pid_t sid) {
  std::vector<pid_t> pids;
  DIR *proc = ::opendir("/proc");
  if (!proc)
    return pids;
  while (dirent *entry = ::readdir(proc)) {
    char *end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0)
      continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    // pid (comm) state ppid pgrp session ...; comm may hold spaces.
    size_t close = text.rfind(')');
    if (close == std::string::npos)
      continue;
    char state = 0;
    long ppid = 0, pgrp = 0, session = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %ld %ld %ld", &state, &ppid,
                    &pgrp, &session) != 4)
      continue;
    if (session == sid && state != 'Z')
      pids.push_back(pid_t(pid));
  }
  ::closedir(proc);
  return pids;
}

void stopSession(pid_t sid, double graceSeconds) {
  auto reap = [&] {
    int status = 0;
    ::waitpid(sid, &status, WNOHANG);
  };
  for (pid_t pid : sessionProcesses(sid))
    ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(graceSeconds);
  while (!sessionProcesses(sid).empty()) {
    reap();
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t pid : sessionProcesses(sid))
        ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  reap();
}

std::string shellLine(const std::vector<std::string> &argv) {
  std::string line;
  for (const std::string &arg : argv) {
    if (!line.empty())
      line += ' ';
    bool plain = !arg.empty() &&
                 arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"
                                       "MNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                     std::string::npos;
    if (plain) {
      line += arg;
      continue;
    }
    line += '\'';
    for (char c : arg)
      line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

} // namespace tpc::sched
