package main

import (
	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/cmd/sluice/internal/quickstart"
)

func newQuickstartCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quickstart",
		Short: "Run an embedded name server and broker with a payment-events demo, then exit",
		Long: `Start a name server and a broker in this process on free loopback ports with a
temporary data directory, create topic PayEvents, send one PaySuccess event per order
(key = order id, JSON body) and a few PayFailed events, and consume them with two
consumer groups: order_service subscribes "PaySuccess || PayFailed", points_service
subscribes "PaySuccess" and adds loyalty points per payment behind the Dedup middleware.
Print what each group received.

Then show the reliability middleware, with an embedded miniredis (or the Redis at
--redis, under a key namespace unique to this run whose keys are deleted at the end):
the producer is wrapped with Keys + Park; the broker is stopped and --outage-sends
payments fail after the producer's own retries and are parked in Redis; the broker is
started again on the same addresses and data directory and the retry task resends the
parked payments; then one payment is delivered twice (the same message, the same key)
and points_service adds its points once, skipping the duplicate. Print the tally (sent,
parked, resent, consumed, duplicates skipped, business effects).

Then book the same PaySuccess payments exactly once through a transactional inbox
(package inbox; an embedded SQLite file, or PostgreSQL with --postgres): group
ledger_service writes one ledger row per payment in the same transaction as the
payment's inbox row. Its first consumer is a child process that commits one batch and
crashes in the middle of the next (its transaction is never finished: the database
drops it); a consumer in this process takes over, the broker redelivers, the inbox skips
what was booked, and a tally counts ledger rows per payment: any payment booked twice or
never fails the run.

Shut everything down, remove the data directory and exit 0 — or exit non-zero naming
what is missing or doubled once --timeout has passed.

With --kafka the payment scenario runs on Kafka instead (package kafka): on the cluster
at --kafka=host:port[,host:port] (also accepted as "--kafka host:port"), or, with a bare
--kafka, on an embedded in-process Kafka-protocol cluster (kfake). The same two groups
consume; points_service fails one payment once (it comes back through its retry topic
points_service.retry.1), cannot parse a malformed event (two retries, then its
dead-letter topic points_service.dlq) and skips a duplicate payment with Dedup. On a real
cluster the topic and group names get a per-run suffix and the run's topics are deleted
at the end. --outage-sends does not apply.`,
		Args: func(cmd *cobra.Command, args []string) error {
			// "--kafka host:port": a bare --kafka takes no value, so the address arrives
			// as the one argument.
			if k, _ := cmd.Flags().GetString("kafka"); k == quickstart.KafkaEmbedded && len(args) == 1 {
				return nil
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			o := quickstart.Options{Out: cmd.OutOrStdout()}
			o.Orders, _ = f.GetInt("orders")
			o.Failed, _ = f.GetInt("failed")
			o.OutageSends, _ = f.GetInt("outage-sends")
			o.Redis, _ = f.GetString("redis")
			o.Timeout, _ = f.GetDuration("timeout")
			o.Postgres, _ = f.GetString("postgres")
			if verbose, _ := f.GetBool("verbose"); verbose {
				l, err := newLogger(cmd)
				if err != nil {
					return err
				}
				o.Logger = l
			}
			if k, _ := f.GetString("kafka"); k != "" {
				if len(args) == 1 {
					k = args[0]
				}
				o.Kafka = k
			}
			return quickstart.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.String("kafka", "", "run the payment scenario on Kafka: --kafka=host:port[,host:port], or a bare --kafka for an embedded in-process cluster")
	f.Lookup("kafka").NoOptDefVal = quickstart.KafkaEmbedded
	f.Int("orders", quickstart.DefaultOrders, "orders paid successfully (one PaySuccess event each), 1..1000")
	f.Int("failed", quickstart.DefaultFailed, "orders whose payment failed (one PayFailed event each), 0..1000")
	f.Int("outage-sends", quickstart.DefaultOutageSends, "payments sent while the broker is down (each parked, then resent), 1..100")
	f.String("redis", "", "Redis \"host:port\" for the reliability part (default: an embedded miniredis); only keys under this run's namespace are written, and they are deleted at the end")
	f.String("postgres", "", "PostgreSQL DSN for the inbox part (postgres://user:pass@host:port/db; default: an embedded SQLite file in the run's data directory); its two tables get names unique to the run and are dropped at the end")
	f.Duration("timeout", quickstart.DefaultTimeout, "how long the whole run may take before it fails, naming what is missing")
	f.Bool("verbose", false, "show the broker, producer, consumer, middleware and retry task logs on stderr (level from --log-level)")
	cmd.AddCommand(newQuickstartInboxChildCmd())
	return cmd
}

// newQuickstartInboxChildCmd is the hidden "sluice quickstart inbox-child": the
// crashing ledger_service consumer the quickstart starts as a child process (configured
// by the SLUICE_QS_INBOX_* environment).
func newQuickstartInboxChildCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "inbox-child",
		Short:  "internal: the crashing consumer process of the quickstart's inbox part",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return quickstart.RunInboxChild(cmd.Context())
		},
	}
}
