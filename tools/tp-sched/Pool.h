// The ranks tp-sched hands out: the allocation a cluster already gave (an
// Open MPI hostfile, or a Slurm allocation's node list and tasks per node),
// or N ranks on this host. Jobs get whole slots, packed onto as few hosts
// as fit, and launch through mpirun's host list.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tpc::sched {

struct Host {
  std::string name;
  int slots = 0;
};

class Pool {
public:
  /// `ranks` slots on localhost.
  static Pool local(int ranks);
  /// An Open MPI hostfile: "HOST [slots=N]" per line, '#' comments (a host
  /// without slots= has one). Throws std::invalid_argument naming the file
  /// and line of the first malformed one.
  static Pool hostfile(const std::string &path);
  /// Slurm's compressed node list ("gpu[01-03,07],login1") and tasks per
  /// node ("4(x3),2", or one count for all), as in SLURM_JOB_NODELIST and
  /// SLURM_TASKS_PER_NODE.
  static Pool slurm(const std::string &nodeList, const std::string &tasks);

  explicit Pool(std::vector<Host> hosts);
  const std::vector<Host> &hosts() const { return all; }
  /// The pool of Pool::local: this host alone.
  bool isLocal() const { return all.size() == 1 && all[0].name == "localhost"; }
  int size() const { return int(owner.size()); }
  int free() const;
  /// Takes `ranks` free slots for `job`, packed (hosts with the most free
  /// slots first); returns the slot numbers (hosts in order, their slots
  /// consecutive). Throws std::logic_error when fewer are free.
  std::vector<int> take(const std::string &job, int ranks);
  /// Takes the given slots (a restarted scheduler's record).
  void takeSlots(const std::string &job, const std::vector<int> &slots);
  void release(const std::string &job);
  /// mpirun's --host argument for slots: "a:2,b:1".
  std::string hostList(const std::vector<int> &slots) const;

private:
  std::vector<Host> all;
  std::vector<std::string> owner; // per slot; empty: free
  std::vector<int> hostOf;        // per slot
};

/// `slots` (ascending) as runs of consecutive slots: (first, count) each,
/// as a timeline draws them.
std::vector<std::pair<int, int>> slotRuns(const std::vector<int> &slots);

/// Expands a Slurm node list; throws std::invalid_argument when malformed.
std::vector<std::string> expandNodeList(const std::string &nodeList);

} // namespace tpc::sched
