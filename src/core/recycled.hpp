// An allocator for the small objects every recorded op makes and drops (a tensor's TensorImpl,
// the fusion decorator's PendingBuffer, with their shared_ptr control blocks): freed blocks are
// kept on a per-thread list for the next object of the same size.
//
// Why: recording chain8 under fusion frees its dropped intermediates' buffers in a burst when
// the group closes, more than glibc's per-thread cache holds (7 blocks of a size), so that most
// of the next group's allocations took malloc's slow path; malloc and free were a third of the
// instructions of recording an op. With glibc's cache raised to 200 blocks
// (GLIBC_TUNABLES=glibc.malloc.tcache_count=200) the same loop ran 20-35% faster. A list of
// kKeptPerThread blocks per size does that for these objects alone.
//
// A block freed on another thread than the one that made it simply joins that thread's list. A
// thread's list is freed when the thread exits; blocks freed after that go straight back to the
// heap. Under AddressSanitizer nothing is kept, so that a use after free is still caught.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace kiln::detail {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr int kKeptPerThread = 0;
#else
inline constexpr int kKeptPerThread = 256;
#endif

// The heap's own allocation of `bytes` aligned to Align, and its release.
template <std::size_t Align>
void* heap_block(std::size_t bytes) {
  if constexpr (Align > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
    return ::operator new (bytes, std::align_val_t{Align});
  else
    return ::operator new(bytes);
}
template <std::size_t Align>
void release_block(void* p, std::size_t bytes) {
  if constexpr (Align > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
    ::operator delete (p, bytes, std::align_val_t{Align});
  else
    ::operator delete(p, bytes);
}

template <std::size_t Size, std::size_t Align>
class FreeList {
 public:
  static void* pop() {
    if (!head_) return nullptr;
    Node* n = head_;
    head_ = n->next;
    --count_;
    return n;
  }
  // False when the list is full (or its thread is exiting): the caller frees the block.
  static bool push(void* p) {
    if (count_ < 0 || count_ >= kKeptPerThread) return false;
    drain_.armed = true;  // (the first use on a thread registers the list's release at its exit)
    head_ = new (p) Node{head_};
    ++count_;
    return true;
  }

 private:
  struct Node {
    Node* next;
  };
  struct Drain {
    bool armed = false;
    ~Drain() {
      while (head_) {
        Node* n = head_;
        head_ = n->next;
        release_block<Align>(n, Size);
      }
      count_ = -1;
    }
  };
  static_assert(Size >= sizeof(Node));
  static inline thread_local Node* head_ = nullptr;
  static inline thread_local int count_ = 0;  // -1 once the thread's list is released
  static inline thread_local Drain drain_;
};

template <class T>
struct Recycled {
  using value_type = T;
  Recycled() = default;
  template <class U>
  Recycled(const Recycled<U>&) {}

  T* allocate(std::size_t n) {
    if (n == 1) {
      if (void* p = List::pop()) return static_cast<T*>(p);
    }
    return static_cast<T*>(heap_block<alignof(T)>(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) {
    if (n == 1 && List::push(p)) return;
    release_block<alignof(T)>(p, n * sizeof(T));
  }
  friend bool operator==(const Recycled&, const Recycled&) { return true; }

 private:
  using List = FreeList<sizeof(T), alignof(T)>;
};

// std::make_shared, with the object and its control block from a Recycled list.
template <class T, class... Args>
std::shared_ptr<T> make_recycled(Args&&... args) {
  return std::allocate_shared<T>(Recycled<T>(), std::forward<Args>(args)...);
}

}  // namespace kiln::detail
