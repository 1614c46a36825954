// The rendezvous store's wire format, shared by its server and its client.
//
// Every message is a frame: a 4-byte little-endian length, then that many bytes. A request's
// bytes are an op, then its fields; a string field is a 4-byte length and its bytes:
//   set   key, value            the value replaces any earlier one
//   get   key                   answered once the key is set
//   add   key, 8-byte delta     the key holds a counter (decimal text, as torch's store keeps it)
//   wait  4-byte count, keys    answered once every key is set
// A reply's bytes are a status, then its payload: get's value, add's new value (8 bytes), nothing
// for set and wait, or the message of an error. Integers are little-endian on every host.
//
// A connection carries one request at a time: the client sends the next only after reading the
// reply to the last, which is what lets the server treat anything else as a broken client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln::dist::wire {

// Limits the server enforces on every request; a client that exceeds one is dropped, so the
// client checks them first and reports the caller's mistake instead. A key is a name; a value is
// a rendezvous blob (NCCL's unique id is 128 bytes); neither should come near these.
inline constexpr std::size_t kMaxKeyBytes = 4096;
inline constexpr std::size_t kMaxValueBytes = std::size_t{64} << 20;
// The longest frame: a set of the longest key and value. A length prefix above it is garbage
// (or an attack) and is refused before anything is buffered.
inline constexpr std::size_t kMaxFrameBytes = 1 + 4 + kMaxKeyBytes + 4 + kMaxValueBytes;
inline constexpr std::size_t kLengthBytes = 4;

enum class Op : std::uint8_t { set = 1, get = 2, add = 3, wait = 4 };
enum class Status : std::uint8_t { ok = 0, error = 1 };

// A request as the server decodes it.
struct Request {
  Op op = Op::get;
  std::vector<std::string> keys;    // one for set, get and add; any number for wait
  std::vector<std::uint8_t> value;  // set's
  std::int64_t delta = 0;           // add's
};

// Whole frames (the length prefix included), ready to send.
std::vector<std::uint8_t> encode_set(const std::string& key, std::span<const std::uint8_t> value);
std::vector<std::uint8_t> encode_get(const std::string& key);
std::vector<std::uint8_t> encode_add(const std::string& key, std::int64_t delta);
std::vector<std::uint8_t> encode_wait(const std::vector<std::string>& keys);
std::vector<std::uint8_t> encode_reply(Status status, std::span<const std::uint8_t> payload);

// A frame's bytes after its length, or nullopt with the reason in `why` when they are not a
// well-formed request within the limits (unknown op, a field past the frame's end, a key or
// value too long, bytes left over).
std::optional<Request> decode_request(std::span<const std::uint8_t> body, std::string& why);

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v);
std::uint32_t get_u32(const std::uint8_t* p);
void put_i64(std::vector<std::uint8_t>& out, std::int64_t v);
std::int64_t get_i64(const std::uint8_t* p);

}  // namespace kiln::dist::wire
