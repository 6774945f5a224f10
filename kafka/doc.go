// Package kafka runs Sluice's handlers, middleware, retries and dead letters over Apache
// Kafka: its [Producer] on github.com/twmb/franz-go (kgo), its [Consumer] on
// github.com/segmentio/kafka-go. It is a package of its own so neither client library
// enters the SDK core's import graph.
//
// # Mapping
//
// A [message.Message] becomes a Kafka record and back (DESIGN "Kafka mapping"):
//
//	topic          → the Kafka topic
//	body           → the record value
//	sharding key   → the record key (the producer's default partitioner hashes it with
//	                 Murmur2, the Java client's key hash, so one key keeps its
//	                 partition and order); also header SHARDING_KEY
//	tag            → header TAGS (filtered on the client: Kafka brokers filter nothing)
//	keys           → header KEYS (space-separated, as the property)
//	other property → a header of the same name (UNIQ_KEY included)
//	flag ≠ 0       → header FLAG (decimal)
//	queue id       ← partition; queue offset ← record offset; broker name ← "kafka"
//	born/store     ← header SLUICE_BORN_MS when set (retry copies keep the first
//	timestamps       send's time), else the record timestamp; store ← record timestamp
//	reconsume      ← header SLUICE_RECONSUME_TIMES
//
// # Consuming
//
// [Consumer] joins a Kafka consumer group through kafka-go's ConsumerGroup/Generation API
// and runs one goroutine per assigned partition, each calling the same
// [middleware.ConsumeFunc] chain a RocketMQ consumer runs. Offsets are committed through
// the generation (so nothing is committed for a partition this member no longer owns),
// only up to the first unfinished offset, periodically, when a partition is revoked and
// on shutdown. A message counts as finished when its handler succeeded, when the
// subscription's tag or SQL92 filter skipped it, or when a copy of it was acknowledged
// by all in-sync replicas of a retry or dead-letter topic — never before.
//
// # Retries, dead letters and delays
//
// A failed message of a concurrent consumer is copied to topic "<group>.retry.<n>", n the
// attempt (1..len(RetrySchedule); later attempts stay on the last topic), with headers
// naming its original topic, partition and offset, its reconsume count, the last error
// and when it is due. The same group consumes the retry topics; a retry partition waits
// until its head is due, blocking only that partition. After MaxReconsumeTimes
// (default 16, the RocketMQ schedule 10 s … 2 h) the copy goes to "<group>.dlq".
// An orderly consumer retries in place instead (the partition waits), then dead-letters.
// A delay level on send goes to topic "sluice.delay.<level>" when the producer has
// DelayTopics set; a [DelayForwarder] moves each record to its real topic when due.
//
// What Kafka cannot do fails with an error wrapping [ErrUnsupported], never a silent
// no-op: timed delivery (TIMER_DELIVER_MS), transactional half messages with check-back,
// a delay level on a producer without DelayTopics.
//
// # Brokers
//
// kafka-go's group API speaks JoinGroup v1, OffsetCommit v2 and OffsetFetch v1. Apache
// Kafka 4.0.0 refused JoinGroup v0–v1 (KIP-896); 4.0.1 and 4.1.0 accept them again
// (KAFKA-19444), so use Kafka 2.x–3.x or ≥ 4.0.1. kafka-go has no cooperative
// rebalancing: in a rebalance every member stops all its partitions (committing them
// first) and resumes with the new assignment.
package kafka
