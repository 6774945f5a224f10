// Package redismw holds Sluice's Redis-backed reliability steps, in the shapes of package
// [middleware]:
//
//   - [Dedup] (consume side): per message key a done marker and a go-redsync lock, so one
//     business effect happens once while nothing fails; failures and crashes lead to a
//     rerun, never to a silent ack. Redis unreachable: fail closed (default) or open.
//     With the lock comes a fencing token ([FencingToken]) for conditional downstream
//     writes ([FencedSet]), so a holder whose lock expired cannot overwrite its
//     successor's write. For effects in a SQL database, package inbox closes the window
//     Dedup leaves (effect and marker are two writes).
//   - [Progress] (consume side): the same markers (-1 failed, 1 done, with a TTL) without
//     the lock.
//   - [Park] (send side): a send that still fails with a retriable error after the
//     producer's own retries is kept as a [ParkedRecord] in a Redis list (or a local
//     fsynced spool file when Redis is down too) and the caller gets a [*middleware.ParkedError];
//     package retrytask resends it.
//
// Redis state changes that must be atomic are Lua scripts (each with a comment listing
// KEYS, ARGV and return values); keys are hash-tagged so related keys share a Redis
// Cluster slot. The steps accept a redis.UniversalClient and never close it.
//
// It imports go-redis and go-redsync; the SDK core (producer, consumer) does not import
// it, so programs that do not use these steps do not compile them.
package redismw
