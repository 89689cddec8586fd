//! The payments consumer Lambda: wiring only, as resq's own consumer is wired (the same
//! environment: MAIN_QUEUE_URL, DLQ_URL, ARCHIVE_BUCKET, …).
#![recursion_limit = "256"]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use payments::RecordPayment;

fn main() -> ExitCode {
    resq::lambda::main("payments", || {
        resq_consumer::lambda::serve(|r| RecordPayment::new(r.store))
    })
}
