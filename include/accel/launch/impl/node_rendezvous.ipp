// The nodes' meeting before each start; node_rendezvous.hpp includes it in header-only mode.
//
// One line each way over TCP: a node sends "join <start> <node-rank> <nproc>", node 0 answers
// "go <node-rank> <nnodes> [<lost node>...]" or "error <message>".
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "../node_rendezvous.hpp"

namespace accel::launcher {
namespace node_meeting {

using Clock = std::chrono::steady_clock;

inline int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
}

// A line read before `deadline`, without its newline; empty when the peer closed or the time ran
// out first.
inline std::optional<std::string> read_line(const FileDescriptor& socket,
                                            Clock::time_point deadline) {
  std::string line;
  for (;;) {
    pollfd entry{socket.get(), POLLIN, 0};
    const int ready = ::poll(&entry, 1, milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    char buffer[256];
    const ssize_t got = ::recv(socket.get(), buffer, sizeof buffer, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return std::nullopt;
    line.append(buffer, static_cast<std::size_t>(got));
    if (const auto end = line.find('\n'); end != std::string::npos) return line.substr(0, end);
    if (line.size() > 65536) return std::nullopt;  // not a launcher
  }
}

// MSG_NOSIGNAL: a peer that is gone is an error here, not a SIGPIPE that ends the launcher.
inline void send_line(const FileDescriptor& socket, const std::string& text) {
  const std::string line = text + '\n';
  std::size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(socket.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the peer is gone; it learns nothing more from us
    sent += static_cast<std::size_t>(n);
  }
}

// A connection to node 0's meeting, tried every 200 ms until `deadline`; empty if none was made.
inline FileDescriptor connect_before(const std::string& host, int port,
                                     Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  do {
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        FileDescriptor socket(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0));
        if (!socket) continue;
        // A host that drops packets would hold connect() for minutes: 2 s per try.
        const timeval limit{2, 0};
        ::setsockopt(socket.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
        if (::connect(socket.get(), a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(found);
          return socket;
        }
      }
      ::freeaddrinfo(found);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (Clock::now() < deadline);
  return FileDescriptor();
}

// Whether the peer has closed its end: a launcher killed after it sent its join line, while it
// waited in the listen queue for node 0's answer.
inline bool peer_gone(const FileDescriptor& socket) {
  pollfd entry{socket.get(), POLLRDHUP, 0};
  return ::poll(&entry, 1, 0) > 0 && (entry.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

inline std::string node_list(const std::vector<int>& nodes) {
  std::string text;
  for (const int node : nodes) text += (text.empty() ? "" : ", ") + std::to_string(node);
  return text;
}

inline std::string nodes_text(std::size_t count) {
  return std::to_string(count) + (count == 1 ? " node" : " nodes");
}

}  // namespace node_meeting

ACCEL_DECL NodeRendezvous::NodeRendezvous(const LaunchOptions& options)
    : options_(options), port_(options.master_port.value_or(default_multi_node_port) + 1) {
  for (int node = 0; node < options.nnodes; ++node) members_.push_back(node);
  if (options.node_rank != 0) return;
  listener_ = FileDescriptor(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener_) fail_with_errno("cannot open a socket for the nodes' rendezvous");
  const int yes = 1;
  ::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port_));
  if (::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener_.get(), 1024) != 0)
    fail_with_errno("node 0 cannot listen on port " + std::to_string(port_) +
                    " (--master-port + 1) for the nodes' rendezvous; free that port or give "
                    "another --master-port");
}

ACCEL_DECL Membership NodeRendezvous::meet(int start) {
  return options_.node_rank == 0 ? host(start) : join(start);
}

ACCEL_DECL void NodeRendezvous::enter_start(int start, LaunchOptions& current) {
  const Membership place = meet(start);
  if (place.nnodes != current.nnodes)
    std::fprintf(stderr,
                 "accel-launch: node%s %s did not come to start %d within --rendezvous-deadline "
                 "%s: the world shrinks from %d to %d ranks (%d node%s; this node is node %d "
                 "now)\n",
                 place.lost.size() == 1 ? "" : "s", node_meeting::node_list(place.lost).c_str(),
                 start + 1, format_seconds(options_.rendezvous_deadline).c_str(),
                 world_size(current), current.nproc * place.nnodes, place.nnodes,
                 place.nnodes == 1 ? "" : "s", place.node_rank);
  current.node_rank = place.node_rank;
  current.nnodes = place.nnodes;
}

ACCEL_DECL Membership NodeRendezvous::host(int start) {
  using namespace node_meeting;
  const auto deadline = Clock::now() + options_.rendezvous_deadline;
  const std::string which = "start " + std::to_string(start + 1);
  std::vector<std::pair<int, FileDescriptor>> joined;  // node 0 itself has no connection
  const auto is_joined = [&](int node) {
    return node == 0 || std::any_of(joined.begin(), joined.end(),
                                    [&](const auto& entry) { return entry.first == node; });
  };
  while (joined.size() + 1 < members_.size() && Clock::now() < deadline) {
    pollfd entry{listener_.get(), POLLIN, 0};
    if (::poll(&entry, 1, std::max(1, milliseconds_until(deadline))) <= 0) continue;
    FileDescriptor peer(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!peer) continue;
    const auto line = read_line(peer, std::max(deadline, Clock::now() + std::chrono::seconds(1)));
    std::istringstream words(line.value_or(""));
    std::string verb;
    int their_start = -1, node = -1, nproc = 0;
    if (!(words >> verb >> their_start >> node >> nproc) || verb != "join") continue;
    std::string refusal;
    if (their_start < start || !std::count(members_.begin(), members_.end(), node))
      refusal = "node " + std::to_string(node) + " came to the nodes' rendezvous of start " +
                std::to_string(their_start + 1) + " after the group went on without it (" +
                which + " runs on nodes " + node_list(members_) +
                "); start it again with a new job once this one has ended";
    else if (is_joined(node))
      refusal = "two launchers came with --node-rank " + std::to_string(node) +
                "; give every node its own --node-rank";
    else if (nproc != options_.nproc)
      refusal = "node " + std::to_string(node) + " starts --nproc " + std::to_string(nproc) +
                " and node 0 --nproc " + std::to_string(options_.nproc) +
                "; give every node the same --nproc";
    if (!refusal.empty()) {
      send_line(peer, "error " + refusal);
      continue;
    }
    joined.emplace_back(node, std::move(peer));
  }
  // A node that joined and then went is lost as well: it would never start its workers.
  std::erase_if(joined, [](const auto& entry) { return peer_gone(entry.second); });
  std::sort(joined.begin(), joined.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Membership place;
  place.nnodes = static_cast<int>(joined.size()) + 1;
  for (const int node : members_)
    if (!is_joined(node)) place.lost.push_back(node);
  const int fewest = fewest_nodes(options_);
  if (place.nnodes < fewest) {
    const std::string message =
        "the nodes' rendezvous of " + which + ": " + std::to_string(place.nnodes) + " of " +
        nodes_text(members_.size()) + " came within --rendezvous-deadline " +
        format_seconds(options_.rendezvous_deadline) + " (node " + node_list(place.lost) +
        " did not), fewer than MIN = " + std::to_string(fewest) + " of --nnodes " +
        std::to_string(fewest) + ":" + std::to_string(options_.nnodes) +
        "; lower MIN (e.g. --nnodes " + std::to_string(place.nnodes) + ":" +
        std::to_string(options_.nnodes) +
        ") to go on with fewer nodes, raise --rendezvous-deadline if a node comes back later, "
        "or start the job again once the nodes are back";
    for (const auto& [node, peer] : joined) send_line(peer, "error " + message);
    fail(message);
  }
  std::string lost;
  for (const int node : place.lost) lost += " " + std::to_string(node);
  members_ = {0};
  for (std::size_t i = 0; i < joined.size(); ++i) {
    send_line(joined[i].second, "go " + std::to_string(i + 1) + " " +
                                    std::to_string(place.nnodes) + lost);
    members_.push_back(joined[i].first);
  }
  return place;
}

ACCEL_DECL Membership NodeRendezvous::join(int start) {
  using namespace node_meeting;
  // Node 0 may still be stopping its workers, then waits up to its deadline for the others.
  const auto deadline =
      Clock::now() + 2 * options_.rendezvous_deadline + options_.grace + std::chrono::seconds(1);
  const std::string where = options_.master_addr + ":" + std::to_string(port_);
  const std::string gone =
      "node 0's launcher, which hosts the nodes' rendezvous at " + where +
      " (--master-addr, --master-port + 1), did not answer node " +
      std::to_string(options_.node_rank) + " before start " + std::to_string(start + 1) +
      " within 2 x --rendezvous-deadline + --grace; a job that loses node 0 cannot go on "
      "(node 0 hosts the rendezvous): start it again from your scheduler";
  const FileDescriptor socket = connect_before(options_.master_addr, port_, deadline);
  if (!socket) fail(gone);
  send_line(socket, "join " + std::to_string(start) + " " + std::to_string(options_.node_rank) +
                        " " + std::to_string(options_.nproc));
  const auto answer = read_line(socket, deadline);
  if (!answer) fail(gone);
  if (answer->starts_with("error ")) fail(answer->substr(6));
  std::istringstream words(*answer);
  std::string verb;
  Membership place;
  if (!(words >> verb >> place.node_rank >> place.nnodes) || verb != "go")
    fail("node 0's launcher at " + where + " answered '" + *answer +
         "', not a rendezvous answer; is another program listening on --master-port + 1?");
  for (int node = 0; words >> node;) place.lost.push_back(node);
  return place;
}

}  // namespace accel::launcher
