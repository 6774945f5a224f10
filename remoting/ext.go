package remoting

import "slices"

// ExtField is one ext field of a command header: a key and its string value (all ext
// values are strings on the wire, docs/protocol.md §1.2).
type ExtField struct {
	Key   string
	Value string
}

// emptyExtList is the ExtList of a decoded header whose extFields object is empty: not
// nil (the header had the object), and with no capacity, so appending never writes to
// shared memory.
var emptyExtList = []ExtField{}

// Ext returns the value of ext field key and whether it is present: from ExtFields
// first, else the last entry of ExtList with that key.
func (c *RemotingCommand) Ext(key string) (string, bool) {
	if c.ExtFields != nil {
		if v, ok := c.ExtFields[key]; ok {
			return v, true
		}
	}
	for i := len(c.ExtList) - 1; i >= 0; i-- {
		if c.ExtList[i].Key == key {
			return c.ExtList[i].Value, true
		}
	}
	return "", false
}

// ExtMap returns the ext fields as a map, moving the entries of ExtList that ExtFields
// lacks into ExtFields first (ExtList becomes nil; the command then has the shape
// decoding into a map gives). It returns nil when the command has neither ExtFields
// nor ExtList. Code that reads or writes ExtFields directly on a command that may be
// in list form calls this first.
func (c *RemotingCommand) ExtMap() map[string]string {
	if c.ExtList == nil {
		return c.ExtFields
	}
	if c.ExtFields == nil {
		c.ExtFields = make(map[string]string, len(c.ExtList))
		for _, f := range c.ExtList {
			c.ExtFields[f.Key] = f.Value // a repeated key: the last wins
		}
	} else {
		for _, f := range slices.Backward(c.ExtList) {
			if _, ok := c.ExtFields[f.Key]; !ok {
				c.ExtFields[f.Key] = f.Value // the last occurrence is seen first
			}
		}
	}
	c.ExtList = nil
	return c.ExtFields
}

// hasExt reports whether the header has an extFields object (else it is written null).
func (c *RemotingCommand) hasExt() bool { return c.ExtFields != nil || c.ExtList != nil }

// listShadowed reports whether list entry f is not written because ExtFields has its key.
func (c *RemotingCommand) listShadowed(f ExtField) bool {
	if c.ExtFields == nil {
		return false
	}
	_, ok := c.ExtFields[f.Key]
	return ok
}

// extMapOf returns list as a map (the last of a repeated key wins).
func extMapOf(list []ExtField) map[string]string {
	m := make(map[string]string, len(list))
	for _, f := range list {
		m[f.Key] = f.Value
	}
	return m
}

// extListOf returns a copy of list the command may own: emptyExtList for an empty one.
func extListOf(list []ExtField) []ExtField {
	if len(list) == 0 {
		return emptyExtList
	}
	return slices.Clone(list)
}

// codeSet is a small set of request codes (a linear scan: it holds a handful).
type codeSet []int16

func newCodeSet(codes []RequestCode) codeSet {
	var s codeSet
	for _, c := range codes {
		if !slices.Contains(s, int16(c)) {
			s = append(s, int16(c))
		}
	}
	return s
}

func (s codeSet) has(code int16) bool { return slices.Contains(s, code) }
