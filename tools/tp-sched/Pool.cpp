#include "Pool.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace tpc::sched {

Pool::Pool(std::vector<Host> hosts) : all(std::move(hosts)) {
  if (all.empty())
    throw std::invalid_argument("the pool has no hosts");
  for (size_t h = 0; h < all.size(); ++h) {
    if (all[h].slots < 1)
      throw std::invalid_argument("host " + all[h].name + " has no slots");
    for (int s = 0; s < all[h].slots; ++s) {
      owner.emplace_back();
      hostOf.push_back(int(h));
    }
  }
}

Pool Pool::local(int ranks) {
  if (ranks < 1)
    throw std::invalid_argument("--ranks must be at least 1");
  return Pool({{"localhost", ranks}});
}

Pool Pool::hostfile(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw std::invalid_argument(path + ": cannot read the hostfile");
  static const std::regex line(
      R"(\s*([A-Za-z0-9][A-Za-z0-9._-]*)((\s+[a-z_]+=[0-9]+)*)\s*)");
  static const std::regex slotsField(R"(slots=([0-9]+))");
  std::vector<Host> hosts;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    text = text.substr(0, text.find('#'));
    if (text.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    std::smatch m;
    if (!std::regex_match(text, m, line))
      throw std::invalid_argument(path + ":" + std::to_string(number) +
                                  ": expected 'HOST [slots=N]'");
    Host host{m[1], 1};
    const std::string fields = m[2];
    std::smatch s;
    if (std::regex_search(fields, s, slotsField)) {
      if (s[1].length() > 6 || std::stoi(s[1]) < 1)
        throw std::invalid_argument(path + ":" + std::to_string(number) +
                                    ": slots must be 1 to 999999");
      host.slots = std::stoi(s[1]);
    }
    hosts.push_back(host);
  }
  if (hosts.empty())
    throw std::invalid_argument(path + ": the hostfile names no host");
  return Pool(std::move(hosts));
}

std::vector<std::string> expandNodeList(const std::string &nodeList) {
  std::vector<std::string> nodes;
  size_t i = 0;
  auto fail = [&] {
    return std::invalid_argument("malformed Slurm node list '" + nodeList +
                                 "'");
  };
  while (i < nodeList.size()) {
    size_t nameEnd = nodeList.find_first_of("[,", i);
    std::string prefix = nodeList.substr(i, nameEnd - i);
    if (prefix.empty())
      throw fail();
    if (nameEnd == std::string::npos || nodeList[nameEnd] == ',') {
      nodes.push_back(prefix);
      i = nameEnd == std::string::npos ? nodeList.size() : nameEnd + 1;
      continue;
    }
    size_t close = nodeList.find(']', nameEnd);
    if (close == std::string::npos)
      throw fail();
    std::stringstream ranges(nodeList.substr(nameEnd + 1, close - nameEnd - 1));
    std::string range;
    while (std::getline(ranges, range, ',')) {
      static const std::regex pattern(R"(([0-9]+)(-([0-9]+))?)");
      std::smatch m;
      if (!std::regex_match(range, m, pattern) || m[1].length() > 9 ||
          m[3].length() > 9)
        throw fail();
      const std::string first = m[1];
      const long lo = std::stol(first),
                 hi = m[3].matched ? std::stol(m[3]) : lo;
      if (hi < lo || hi - lo > 100000)
        throw fail();
      for (long n = lo; n <= hi; ++n) {
        std::string digits = std::to_string(n);
        if (digits.size() < first.size()) // zero padding
          digits.insert(0, first.size() - digits.size(), '0');
        nodes.push_back(prefix + digits);
      }
    }
    i = close + 1;
    if (i < nodeList.size()) {
      if (nodeList[i] != ',')
        throw fail();
      ++i;
    }
  }
  if (nodes.empty())
    throw fail();
  return nodes;
}

Pool Pool::slurm(const std::string &nodeList, const std::string &tasks) {
  std::vector<std::string> nodes = expandNodeList(nodeList);
  std::vector<int> counts;
  std::stringstream parts(tasks);
  std::string part;
  static const std::regex pattern(R"(([0-9]{1,6})(\(x([0-9]{1,6})\))?)");
  while (std::getline(parts, part, ',')) {
    std::smatch m;
    if (!std::regex_match(part, m, pattern))
      throw std::invalid_argument("malformed Slurm tasks per node '" + tasks +
                                  "'");
    int repeat = m[3].matched ? std::stoi(m[3]) : 1;
    counts.insert(counts.end(), size_t(repeat), std::stoi(m[1]));
  }
  if (counts.size() == 1)
    counts.assign(nodes.size(), counts[0]);
  if (counts.size() != nodes.size())
    throw std::invalid_argument("Slurm tasks per node '" + tasks + "' give " +
                                std::to_string(counts.size()) + " counts for " +
                                std::to_string(nodes.size()) + " nodes");
  std::vector<Host> hosts;
  for (size_t n = 0; n < nodes.size(); ++n)
    hosts.push_back({nodes[n], counts[n]});
  return Pool(std::move(hosts));
}

int Pool::free() const {
  return int(std::count(owner.begin(), owner.end(), std::string()));
}

std::vector<int> Pool::take(const std::string &job, int ranks) {
  if (ranks > free())
    throw std::logic_error("the pool has " + std::to_string(free()) +
                           " free slots, not " + std::to_string(ranks));
  std::vector<int> freeOn(all.size(), 0);
  for (size_t s = 0; s < owner.size(); ++s)
    if (owner[s].empty())
      ++freeOn[size_t(hostOf[s])];
  std::vector<size_t> hosts(all.size());
  for (size_t h = 0; h < hosts.size(); ++h)
    hosts[h] = h;
  std::sort(hosts.begin(), hosts.end(), [&](size_t a, size_t b) {
    return std::make_pair(-freeOn[a], a) < std::make_pair(-freeOn[b], b);
  });
  std::vector<int> slots;
  for (size_t h : hosts)
    for (size_t s = 0; s < owner.size() && int(slots.size()) < ranks; ++s)
      if (owner[s].empty() && size_t(hostOf[s]) == h) {
        owner[s] = job;
        slots.push_back(int(s));
      }
  return slots;
}

void Pool::takeSlots(const std::string &job, const std::vector<int> &slots) {
  for (int s : slots) {
    if (s < 0 || s >= size() || !owner[size_t(s)].empty())
      throw std::invalid_argument("slot " + std::to_string(s) +
                                  " is not a free slot of the pool");
    owner[size_t(s)] = job;
  }
}

void Pool::release(const std::string &job) {
  for (std::string &o : owner)
    if (o == job)
      o.clear();
}

std::vector<std::pair<int, int>> slotRuns(const std::vector<int> &slots) {
  std::vector<std::pair<int, int>> runs;
  for (int s : slots)
    if (!runs.empty() && runs.back().first + runs.back().second == s)
      ++runs.back().second;
    else
      runs.emplace_back(s, 1);
  return runs;
}

std::string Pool::hostList(const std::vector<int> &slots) const {
  std::map<int, int> perHost;
  std::vector<int> order;
  for (int s : slots) {
    int h = hostOf[size_t(s)];
    if (!perHost.count(h))
      order.push_back(h);
    ++perHost[h];
  }
  std::string list;
  for (int h : order)
    list += (list.empty() ? "" : ",") + all[size_t(h)].name + ":" +
            std::to_string(perHost[h]);
  return list;
}

} // namespace tpc::sched
