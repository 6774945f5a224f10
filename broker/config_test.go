package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/config"
)

func TestParseConfig(t *testing.T) {
	t.Setenv("ROCKETMQ_HOME", "") // aclEnable without aclFile must be refused
	conf := `# a broker.conf as Apache RocketMQ ships it
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = SYNC_FLUSH
autoCreateTopicEnable=false
messageDelayLevel=1s 2s
storePathRootDir=/tmp/x
listenPort: 0
messageIndexEnable=true
maxHashSlotNum=5000000
maxIndexNum=20000000
`
	c, err := ParseConfig(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	c.setDefaults()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.FileReservedTime != 48 || c.FlushDiskType != "SYNC_FLUSH" || boolOr(c.AutoCreateTopicEnable, true) || c.ListenAddr != "127.0.0.1:0" {
		t.Fatalf("parsed %+v", c)
	}
	var ce *config.Error
	for in, key := range map[string]string{
		"noSuchKey=1":                 "noSuchKey",
		"listenPort=abc":              "listenPort",
		"brokerName=a\nbrokerName=b":  "brokerName",
		"autoCreateTopicEnable=maybe": "autoCreateTopicEnable",
		"=orphan":                     "=orphan",
	} {
		if _, err := ParseConfig(strings.NewReader(in)); !errors.As(err, &ce) || ce.Field != key {
			t.Errorf("%q: want ConfigError for %q, got %v", in, key, err)
		}
	}
	// Java properties details, old spellings and switches for missing features.
	c2, err := ParseConfig(strings.NewReader("brokerId 0\nmapedFileSizeCommitLog=8388608\naclEnable=false\nbrokerIP2=10.0.0.1\n" +
		"storePathRootDir=/data/store\nstorePathCommitLog=/data/store/commitlog\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Validate(); err != nil || c2.MappedFileSizeCommitLog != 8<<20 {
		t.Fatalf("java-style file: %v %+v", err, c2)
	}
	for in, key := range map[string]string{
		"storePathRootDir=/a\naclEnable=true":                  "aclFile",
		"storePathRootDir=/a\naccessKey=abcdefg":               "secretKey",
		"enableDLegerCommitLog=true":                           "enableDLegerCommitLog",
		"storePathRootDir=/a\nstorePathCommitLog=/b/commitlog": "storePathCommitLog",
		"storePathRootDir=/a\nnamesrvAddr=garbage":             "namesrvAddr",
		"storePathRootDir=/a\nnamesrvAddr=127.0.0.1:9876;x:y":  "namesrvAddr",
	} {
		c3, err := ParseConfig(strings.NewReader(in))
		if err == nil {
			err = c3.Validate()
		}
		if !errors.As(err, &ce) || ce.Field != key {
			t.Errorf("%q: want ConfigError for %q, got %v", in, key, err)
		}
	}
	for _, bad := range []Config{
		{},
		{StorePathRootDir: "/x", BrokerRole: "SLAVE"},
		{StorePathRootDir: "/x", FlushDiskType: "SOMETIMES"},
		{StorePathRootDir: "/x", MessageDelayLevel: "1s 5x"},
		{StorePathRootDir: "/x", MappedFileSizeCommitLog: 1024},
	} {
		if err := bad.Validate(); !errors.As(err, &ce) {
			t.Errorf("%+v: want ConfigError, got %v", bad, err)
		}
	}
}

// TestAddressShareConfig: the per-address shares of maxClientEntries and
// maxSubscriptions default to a tenth and a twentieth (with a floor for small totals),
// follow an unlimited total, and a share above its total is a *ConfigError naming the key
// and the limit.
func TestAddressShareConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg                  Config
		wantEntries, wantSub int
	}{
		{Config{}, 10000, 10000},
		{Config{MaxClientEntries: 50, MaxSubscriptions: 500}, 50, 500},
		{Config{MaxClientEntries: -1, MaxSubscriptions: -1}, -1, -1},
		{Config{MaxClientEntriesPerAddress: -1, MaxSubscriptionsPerAddress: 7}, -1, 7},
	} {
		c := tc.cfg
		c.StorePathRootDir = "/x"
		c.setDefaults()
		if err := c.validate(); err != nil {
			t.Fatalf("%+v: %v", tc.cfg, err)
		}
		if c.MaxClientEntriesPerAddress != tc.wantEntries || c.MaxSubscriptionsPerAddress != tc.wantSub {
			t.Errorf("shares %d and %d, want %d and %d", c.MaxClientEntriesPerAddress, c.MaxSubscriptionsPerAddress, tc.wantEntries, tc.wantSub)
		}
	}
	var ce *config.Error
	for key, bad := range map[string]Config{
		"maxClientEntriesPerAddress": {StorePathRootDir: "/x", MaxClientEntries: 10, MaxClientEntriesPerAddress: 11},
		"maxSubscriptionsPerAddress": {StorePathRootDir: "/x", MaxSubscriptionsPerAddress: -2},
	} {
		if err := bad.Validate(); !errors.As(err, &ce) || ce.Field != key {
			t.Errorf("want ConfigError for %s, got %v", key, err)
		}
	}
	err := (&Config{StorePathRootDir: "/x", MaxClientEntries: 10, MaxClientEntriesPerAddress: 11}).Validate()
	if err == nil || !strings.Contains(err.Error(), "at most maxClientEntries (10)") {
		t.Errorf("error does not name the limit: %v", err)
	}
}

// TestAclSignatureNoncesPerAccountConfig: the per-account share of the nonce store
// defaults to 100000 and must be between 1 and the store's 1,000,000.
func TestAclSignatureNoncesPerAccountConfig(t *testing.T) {
	c := Config{StorePathRootDir: "/x"}
	c.setDefaults()
	if c.AclSignatureNoncesPerAccount != 100000 {
		t.Fatalf("default %d", c.AclSignatureNoncesPerAccount)
	}
	var ce *config.Error
	for _, v := range []int{-1, 1_000_001} {
		err := (&Config{StorePathRootDir: "/x", AclSignatureNoncesPerAccount: v}).Validate()
		if !errors.As(err, &ce) || ce.Field != "aclSignatureNoncesPerAccount" || !strings.Contains(err.Error(), "between 1 and 1000000") {
			t.Errorf("%d: %v", v, err)
		}
	}
}
