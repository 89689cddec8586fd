//! The consumer Lambda: wiring only (resq's reference order handler on the engine).
// The handler future nests the SDK clients' futures deeply; the release build needs the room.
#![recursion_limit = "256"]

// Many small allocations per record: mimalloc keeps them cheap where glibc malloc did not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use resq_consumer::order::RecordOrder;

fn main() -> ExitCode {
    resq_consumer::lambda::return_freed_memory_at_once();
    resq::lambda::main("consumer", || {
        resq_consumer::lambda::serve(|r| RecordOrder::new(r.store))
    })
}
