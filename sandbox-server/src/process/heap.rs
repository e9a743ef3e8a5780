//! The server's own heap, given back once the server is ready.
//!
//! Starting builds and drops about a megabyte: the router's OpenAPI paths (utoipa-axum builds
//! every operation's description while the routes are registered, and the document itself is
//! made again at its first request), the validated configuration, the containment's probes.
//! glibc keeps what was freed in its arenas' free lists, resident, because a few live blocks
//! sit above it; an idle server would carry that megabyte for its whole life.

#![allow(unsafe_code)] // one libc call; see its `// SAFETY:`

/// Returns every whole free page of the allocator's arenas to the kernel. Says whether any
/// memory was released; a no-op (false) where the C library is not glibc.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointer, touches only the allocator's own state, and
        // locks each arena while it trims it, so other threads may allocate meanwhile.
        unsafe { nix::libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
