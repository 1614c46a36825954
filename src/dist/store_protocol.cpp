// The rendezvous store's wire format (store_protocol.hpp).
#include "dist/store_protocol.hpp"

#include <fmt/format.h>

namespace kiln::dist::wire {
namespace {

// A frame under construction: reserves the length prefix and fills it in at the end.
class FrameWriter {
 public:
  explicit FrameWriter(std::size_t body_hint) {
    bytes_.reserve(kLengthBytes + body_hint);
    bytes_.resize(kLengthBytes);
  }
  void byte(std::uint8_t b) { bytes_.push_back(b); }
  void field(std::span<const std::uint8_t> s) {
    put_u32(bytes_, static_cast<std::uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void field(const std::string& s) {
    field({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
  }
  std::vector<std::uint8_t>& bytes() { return bytes_; }
  std::vector<std::uint8_t> finish() {
    const auto body = static_cast<std::uint32_t>(bytes_.size() - kLengthBytes);
    for (std::size_t i = 0; i < kLengthBytes; ++i)
      bytes_[i] = static_cast<std::uint8_t>(body >> (8 * i));
    return std::move(bytes_);
  }

 private:
  std::vector<std::uint8_t> bytes_;
};

// Reads fields off a frame's body, checking each against what is left before taking it: a
// length from the wire is never trusted to size an allocation by itself.
class FrameReader {
 public:
  explicit FrameReader(std::span<const std::uint8_t> body) : rest_(body) {}
  bool u8(std::uint8_t& v) {
    return take(1, [&](const std::uint8_t* p) { v = *p; });
  }
  bool u32(std::uint32_t& v) {
    return take(4, [&](const std::uint8_t* p) { v = get_u32(p); });
  }
  bool i64(std::int64_t& v) {
    return take(8, [&](const std::uint8_t* p) { v = get_i64(p); });
  }
  // A length-prefixed field of at most `max` bytes.
  bool field(std::size_t max, std::span<const std::uint8_t>& s) {
    std::uint32_t n = 0;
    if (!u32(n) || n > max || n > rest_.size()) return false;
    s = rest_.first(n);
    rest_ = rest_.subspan(n);
    return true;
  }
  bool key(std::string& k) {
    std::span<const std::uint8_t> s;
    if (!field(kMaxKeyBytes, s)) return false;
    k.assign(reinterpret_cast<const char*>(s.data()), s.size());
    return true;
  }
  bool done() const { return rest_.empty(); }

 private:
  template <typename F>
  bool take(std::size_t n, F f) {
    if (rest_.size() < n) return false;
    f(rest_.data());
    rest_ = rest_.subspan(n);
    return true;
  }
  std::span<const std::uint8_t> rest_;
};

}  // namespace

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{p[i]} << (8 * i);
  return v;
}

void put_i64(std::vector<std::uint8_t>& out, std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(u >> (8 * i)));
}

std::int64_t get_i64(const std::uint8_t* p) {
  std::uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= std::uint64_t{p[i]} << (8 * i);
  return static_cast<std::int64_t>(u);
}

std::vector<std::uint8_t> encode_set(const std::string& key, std::span<const std::uint8_t> value) {
  FrameWriter w(1 + 4 + key.size() + 4 + value.size());
  w.byte(static_cast<std::uint8_t>(Op::set));
  w.field(key);
  w.field(value);
  return w.finish();
}

std::vector<std::uint8_t> encode_get(const std::string& key) {
  FrameWriter w(1 + 4 + key.size());
  w.byte(static_cast<std::uint8_t>(Op::get));
  w.field(key);
  return w.finish();
}

std::vector<std::uint8_t> encode_add(const std::string& key, std::int64_t delta) {
  FrameWriter w(1 + 4 + key.size() + 8);
  w.byte(static_cast<std::uint8_t>(Op::add));
  w.field(key);
  put_i64(w.bytes(), delta);
  return w.finish();
}

std::vector<std::uint8_t> encode_wait(const std::vector<std::string>& keys) {
  FrameWriter w(1 + 4 + 64 * keys.size());
  w.byte(static_cast<std::uint8_t>(Op::wait));
  put_u32(w.bytes(), static_cast<std::uint32_t>(keys.size()));
  for (const std::string& k : keys) w.field(k);
  return w.finish();
}

std::vector<std::uint8_t> encode_reply(Status status, std::span<const std::uint8_t> payload) {
  FrameWriter w(1 + payload.size());
  w.byte(static_cast<std::uint8_t>(status));
  w.bytes().insert(w.bytes().end(), payload.begin(), payload.end());
  return w.finish();
}

std::optional<Request> decode_request(std::span<const std::uint8_t> body, std::string& why) {
  FrameReader r(body);
  Request req;
  std::uint8_t op = 0;
  if (!r.u8(op)) {
    why = "an empty request";
    return std::nullopt;
  }
  req.op = static_cast<Op>(op);
  bool ok = false;
  switch (req.op) {
    case Op::set: {
      std::span<const std::uint8_t> value;
      ok = r.key(req.keys.emplace_back()) && r.field(kMaxValueBytes, value);
      req.value.assign(value.begin(), value.end());
      break;
    }
    case Op::get:
      ok = r.key(req.keys.emplace_back());
      break;
    case Op::add:
      ok = r.key(req.keys.emplace_back()) && r.i64(req.delta);
      break;
    case Op::wait: {
      std::uint32_t count = 0;
      ok = r.u32(count);
      // Each key takes at least its 4-byte length, so the frame bounds the count.
      for (std::uint32_t i = 0; ok && i < count; ++i) ok = r.key(req.keys.emplace_back());
      break;
    }
    default:
      why = fmt::format("unknown op {}", op);
      return std::nullopt;
  }
  if (!ok) {
    why = fmt::format(
        "a malformed op {} request (a field runs past the frame, or a key over {} "
        "or a value over {} bytes)",
        op, kMaxKeyBytes, kMaxValueBytes);
    return std::nullopt;
  }
  if (!r.done()) {
    why = fmt::format("an op {} request with bytes left over", op);
    return std::nullopt;
  }
  return req;
}

}  // namespace kiln::dist::wire
