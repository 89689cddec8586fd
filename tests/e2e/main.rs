//! End-to-end tests against a real SQS/S3 API: a moto server each test starts on 127.0.0.1,
//! or LocalStack with `E2E_EMULATOR=localstack` (`make test` runs the suite on both).
//! Messages are sent and received for real; the Lambda event is built from what was received,
//! exactly as Lambda's SQS poller builds it.

mod chaos;
mod cli;
mod consumer;
mod consumer_breaker;
mod docs;
mod fixtures;
mod helpers;
mod hostile;
mod levels;
mod live;
mod ops;
mod own_function;
mod payloads;
mod redriver;
mod security;
mod soak;
mod template;
mod tenants;
mod third_party;
mod wiring;
mod workspace;
