//! resq's local pipeline, for developers: the stack on a local AWS (moto or LocalStack), what
//! AWS does around the two functions (Lambda's SQS event source mapping, the EventBridge
//! schedule, Lambda's log pipeline into CloudWatch, the runtime API), and the runs built on
//! them: the live pipeline (`resq-local up`, `make local`), the demo, the chaos run and the
//! soak. The operator's tool (`resq`, crate `cli`) works against AWS and knows nothing of this.
#![warn(missing_docs)]

pub mod chaos;
pub mod demo;
pub mod driver;
pub mod emf;
pub mod emulator;
pub mod env;
pub mod event;
pub mod http;
pub mod live;
pub mod pipeline;
pub mod soak;
pub mod stack;

pub use resq_ops::CliError;

/// A mutex's guard, also after a panic poisoned it: what a run counted stays readable.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
