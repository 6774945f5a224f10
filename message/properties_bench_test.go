package message

import "testing"

// benchProps are the properties of a typical produced message (tag, keys, unique key,
// cluster, one user property).
var benchProps = map[string]string{
	PropertyTags:                      "TagA",
	PropertyKeys:                      "order-1234567",
	PropertyUniqClientMessageIDKeyIdx: "7F0000010001B4AAC2A1D3E40000000A",
	PropertyCluster:                   "DefaultCluster",
	"region":                          "eu-west",
}

// BenchmarkMarshalProperties encodes five properties (the store does it for every message).
func BenchmarkMarshalProperties(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if MarshalProperties(benchProps) == "" {
			b.Fatal("empty")
		}
	}
}

// BenchmarkUnmarshalProperties decodes five properties (the broker does it for every send).
func BenchmarkUnmarshalProperties(b *testing.B) {
	s := MarshalProperties(benchProps)
	b.ReportAllocs()
	for b.Loop() {
		if len(UnmarshalProperties(s)) != len(benchProps) {
			b.Fatal("lost a property")
		}
	}
}
