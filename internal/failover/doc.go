// Package failover holds the broker failover campaigns (tests only): the Sluice producer,
// consumers and the transactional inbox under steady load while masters of an Apache
// RocketMQ 4.9 master/slave cluster, the leader of a DLedger group or a Kafka partition
// leader are killed with SIGKILL and restarted, counted per message key — with plain
// sends and consumption, orderly consumption of sharding keys, transactions whose
// decision is lost with the master, and delay levels due during the outage. They start JVM
// clusters from the peers' jars (internal/peers) and run only when SLUICE_FAILOVER_KILLS
// is set; see docs/scaling.md for the figures and the command.
package failover
