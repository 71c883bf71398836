// Decoding and canonical hashing of a node daemon's report (`sections`): the
// RFC 8785 canonical form and its hash, with the rules of the report.
//
// The decoder is a single-pass, schema-driven JSON parser: it never builds a
// generic tree, never descends into a value of the wrong type, and reports the
// first offending field (in document order) as INVALID_INPUT with a
// details.path such as `sections.gpus[3].uuid`. It never panics.

package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/bettercompute/computed/internal/errs"
)

// Sections is a node daemon's report, typed.
type Sections struct {
	System   *System           `json:"system,omitempty" doc:"The machine's identity."`
	CPU      *CPU              `json:"cpu,omitempty" doc:"The processors."`
	Memory   *Memory           `json:"memory,omitempty" doc:"The installed memory."`
	GPUs     []GPU             `json:"gpus,omitempty" doc:"The GPUs."`
	Disks    []Disk            `json:"disks,omitempty" doc:"The block devices."`
	NICs     []NIC             `json:"nics,omitempty" doc:"The network interfaces."`
	Drivers  map[string]string `json:"drivers,omitempty" doc:"Driver names to versions."`                     // name -> version
	Firmware map[string]string `json:"firmware,omitempty" doc:"Firmware names (bios, bmc, ...) to versions."` // e.g. bios, bmc -> version
	OS       *OS               `json:"os,omitempty" doc:"The running operating system."`
}

// System identifies the machine.
type System struct {
	Vendor  string `json:"vendor,omitempty" doc:"The machine's vendor."`
	Product string `json:"product,omitempty" doc:"The machine's product name."`
	Serial  string `json:"serial,omitempty" doc:"The machine's serial number."`
	UUID    string `json:"uuid,omitempty" doc:"The machine's system UUID."`
}

// CPU describes the processors. Counts are nil when not reported.
type CPU struct {
	Model   string `json:"model,omitempty" doc:"The processor model."`
	Arch    string `json:"arch,omitempty" doc:"The processor architecture."`
	Sockets *int   `json:"sockets,omitempty" doc:"How many sockets, when reported."`
	Cores   *int   `json:"cores,omitempty" doc:"How many cores, when reported."`
	Threads *int   `json:"threads,omitempty" doc:"How many hardware threads, when reported."`
}

// Memory describes the installed memory.
type Memory struct {
	TotalBytes *int64 `json:"totalBytes,omitempty" doc:"The installed memory in bytes, when reported."`
}

// GPU is one GPU. UUID is its device id. Optional numbers are nil when not
// reported (index 0 is a real index, so they are pointers).
type GPU struct {
	UUID       string      `json:"uuid" doc:"The GPU's UUID: its device id."`
	Index      *int        `json:"index,omitempty" doc:"The GPU's index on the machine, when reported."`
	Model      string      `json:"model,omitempty" doc:"The GPU's model, when reported."`
	MemoryMiB  *int        `json:"memoryMiB,omitempty" doc:"The GPU's memory in MiB, when reported."`
	PCIBusID   string      `json:"pciBusId,omitempty" doc:"The GPU's PCI bus id, when reported."`
	MigMode    string      `json:"migMode,omitempty" doc:"The GPU's MIG mode (enabled or disabled), when reported."` // "enabled", "disabled" or "" (not reported)
	MigDevices []MIGDevice `json:"migDevices,omitempty" doc:"The MIG devices the GPU is split into, when reported."`
}

// MIGDevice is one MIG instance of a GPU.
type MIGDevice struct {
	Profile string `json:"profile" doc:"The MIG profile the device was made with."`
	UUID    string `json:"uuid" doc:"The MIG device's UUID."`
}

// Disk is one block device. WWN is its device id.
type Disk struct {
	WWN       string `json:"wwn" doc:"The disk's WWN: its device id."`
	Serial    string `json:"serial,omitempty" doc:"The disk's serial number, when reported."`
	Model     string `json:"model,omitempty" doc:"The disk's model, when reported."`
	SizeBytes *int64 `json:"sizeBytes,omitempty" doc:"The disk's size in bytes, when reported."`
	Slot      string `json:"slot,omitempty" doc:"The slot the disk sits in, when reported: disk.replaced compares the WWN in each slot."`
}

// NIC is one network interface. Its device id is its lowercased MAC; MAC
// keeps the spelling the daemon sent.
type NIC struct {
	MAC       string `json:"mac" doc:"The interface's MAC address, as reported; its device id is this MAC in lower case."`
	Name      string `json:"name,omitempty" doc:"The interface's name, when reported."`
	SpeedMbps *int64 `json:"speedMbps,omitempty" doc:"The link speed in Mbps, when reported."`
}

// OS describes the running operating system.
type OS struct {
	Name    string `json:"name,omitempty" doc:"The operating system's name."`
	Version string `json:"version,omitempty" doc:"The operating system's version."`
	Kernel  string `json:"kernel,omitempty" doc:"The running kernel's version."`
}

// DeviceID is the GPU's stable device id, its UUID.
func (g GPU) DeviceID() string { return g.UUID }

// DeviceID is the disk's stable device id, its WWN.
func (d Disk) DeviceID() string { return d.WWN }

// DeviceID is the NIC's stable device id, its lowercased MAC.
func (n NIC) DeviceID() string { return strings.ToLower(n.MAC) }

// Limits of a report. They are part of the method's contract.
const (
	MaxDepth      = 8        // nesting levels of the sections value (the schema itself needs 5)
	MaxString     = 256      // characters (Unicode code points) of any string, object keys included
	MaxGPUs       = 64       // items of gpus
	MaxMIGDevices = 64       // items of one GPU's migDevices
	MaxDisks      = 256      // items of disks
	MaxNICs       = 256      // items of nics
	MaxMapEntries = 64       // entries of drivers and of firmware
	maxIDLen      = 128      // GPU/MIG uuid and disk wwn
	maxMapKeyLen  = 64       // drivers/firmware keys
	maxBytes      = 1 << 53  // sizeBytes, totalBytes
	maxMemoryMiB  = 16777216 // memoryMiB
	maxIndex      = 255      // GPU index
	maxSpeedMbps  = 10000000 // speedMbps
	maxCount      = 65535    // cpu sockets, cores, threads
)

// Decode checks raw (the JSON value of the `sections` input field) and
// returns the typed sections, the RFC 8785 canonical JSON bytes of raw, and
// the lowercase hex SHA-256 of those bytes. Every rejection is INVALID_INPUT
// with details.path naming the first offending field.
func Decode(raw []byte) (*Sections, []byte, string, error) {
	p := parser{data: raw}
	s, err := p.sections()
	if err != nil {
		return nil, nil, "", err
	}
	canonical, err := jcs.Transform(raw)
	if err != nil {
		// Unreachable: the parser accepts a strict subset of what JCS accepts.
		return nil, nil, "", errs.Invalid("sections", "sections cannot be canonicalized: %v", err)
	}
	return s, canonical, Hash(canonical), nil
}

// Hash is the lowercase hex SHA-256 of canonical bytes.
func Hash(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// Parse decodes canonical JSON already stored (trusted: no limits beyond
// correctness) into Sections. Fields this version does not know are ignored,
// so older or newer stored snapshots still load. Its errors are not domain
// errors: a stored snapshot that does not parse is a bug (INTERNAL).
func Parse(canonical []byte) (*Sections, error) {
	var s Sections
	if err := json.Unmarshal(canonical, &s); err != nil {
		return nil, fmt.Errorf("inventory: parse stored sections: %w", err)
	}
	return &s, nil
}

// ---------------------------------------------------------------------------
// The parser.

// pathElem is one step of the current path: a key, or an index when index >= 0.
type pathElem struct {
	key   string
	index int
}

type migRef struct{ gpu, mig int }

type parser struct {
	data  []byte
	pos   int
	depth int
	path  []pathElem
	keys  []string // keys of the open objects, for duplicate detection
	buf   []byte   // scratch for strings with escapes

	gpuUUIDs map[string]int
	migUUIDs map[string]migRef
	wwns     map[string]int
	slots    map[string]int
	macs     map[string]int
}

func (p *parser) push(key string) { p.path = append(p.path, pathElem{key: key, index: -1}) }
func (p *parser) pushIndex(i int) { p.path = append(p.path, pathElem{index: i}) }
func (p *parser) pop()            { p.path = p.path[:len(p.path)-1] }

func (p *parser) pathString() string {
	var b strings.Builder
	b.WriteString("sections")
	for _, e := range p.path {
		if e.index < 0 {
			b.WriteByte('.')
			b.WriteString(e.key)
		} else {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(e.index))
			b.WriteByte(']')
		}
	}
	return b.String()
}

// fail rejects the value at the current path: the message starts with the path.
func (p *parser) fail(format string, args ...any) error {
	path := p.pathString()
	return errs.Invalid(path, "%s %s", path, fmt.Sprintf(format, args...))
}

// syntax rejects malformed JSON found while reading the value at the current path.
func (p *parser) syntax(what string) error {
	if p.pos >= len(p.data) {
		return p.fail("is not valid JSON: unexpected end of input, %s", what)
	}
	return p.fail("is not valid JSON: unexpected %s at offset %d, %s", quoteByte(p.data[p.pos]), p.pos, what)
}

// badString rejects a string whose content is not valid JSON text.
func (p *parser) badString(prob string) error {
	return p.fail("is not valid JSON: %s at offset %d", prob, p.pos)
}

func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *parser) ws() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// atEnd skips whitespace and tells whether the input is exhausted.
func (p *parser) atEnd() bool {
	p.ws()
	return p.pos >= len(p.data)
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (p *parser) peek() byte {
	p.ws()
	if p.pos < len(p.data) {
		return p.data[p.pos]
	}
	return 0
}

// kindOf names the JSON type a value starting with c has ("" when no value
// starts with c).
func kindOf(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	return ""
}

// wrongType rejects the value at the current position, which is not of the wanted type.
func (p *parser) wrongType(want string) error {
	got := kindOf(p.peek())
	if got == "" {
		return p.syntax("expected a value")
	}
	return p.fail("must be %s, not %s", want, got)
}

// objState walks one object: field returns its keys one at a time. The keys
// seen so far are p.keys[base:] (a stack shared by the nested objects).
type objState struct {
	n    int
	base int
}

func (p *parser) openObject(st *objState) error {
	if p.peek() != '{' {
		return p.wrongType("an object")
	}
	if p.depth++; p.depth > MaxDepth {
		return p.fail("nests deeper than %d levels", MaxDepth)
	}
	p.pos++
	st.base = len(p.keys)
	return nil
}

// field advances to the next key of the object, pushes it on the path and
// returns it; ok is false after the closing brace.
func (p *parser) field(st *objState) (key string, ok bool, err error) {
	c := p.peek()
	if st.n > 0 {
		p.pop()
		switch c {
		case ',':
			p.pos++
			c = p.peek()
		case '}':
			p.pos++
			p.depth--
			p.keys = p.keys[:st.base]
			return "", false, nil
		default:
			return "", false, p.syntax("expected ',' or '}'")
		}
	} else if c == '}' {
		p.pos++
		p.depth--
		p.keys = p.keys[:st.base]
		return "", false, nil
	}
	if c != '"' {
		return "", false, p.syntax("expected a field name")
	}
	key, prob := p.scanString(MaxString)
	switch prob {
	case "":
	case probTooLong:
		return "", false, p.fail("has a field name longer than %d characters", MaxString)
	case probNUL:
		return "", false, p.fail("has a field name containing a NUL character")
	default:
		return "", false, p.badString(prob)
	}
	for _, s := range p.keys[st.base:] {
		if s == key {
			p.push(key)
			return "", false, p.fail("is a duplicate key")
		}
	}
	p.keys = append(p.keys, key)
	if p.peek() != ':' {
		return "", false, p.syntax("expected ':'")
	}
	p.pos++
	p.push(key)
	st.n++
	return key, true, nil
}

func (p *parser) unknown(what string) error {
	return p.fail("is not a known %s", what)
}

// arrState walks one array: elem returns its indexes one at a time.
type arrState struct {
	n   int
	max int
}

func (p *parser) openArray(st *arrState, max int) error {
	if p.peek() != '[' {
		return p.wrongType("an array")
	}
	if p.depth++; p.depth > MaxDepth {
		return p.fail("nests deeper than %d levels", MaxDepth)
	}
	p.pos++
	st.max = max
	return nil
}

// elem advances to the next element, pushes its index on the path and
// returns it; ok is false after the closing bracket.
func (p *parser) elem(st *arrState) (i int, ok bool, err error) {
	c := p.peek()
	if st.n > 0 {
		p.pop()
		switch c {
		case ',':
			p.pos++
			c = p.peek()
		case ']':
			p.pos++
			p.depth--
			return 0, false, nil
		default:
			return 0, false, p.syntax("expected ',' or ']'")
		}
	} else if c == ']' {
		p.pos++
		p.depth--
		return 0, false, nil
	}
	if st.n >= st.max {
		return 0, false, p.fail("has more than %d items", st.max)
	}
	if kindOf(c) == "" {
		p.pushIndex(st.n)
		return 0, false, p.syntax("expected a value")
	}
	p.pushIndex(st.n)
	st.n++
	return st.n - 1, true, nil
}

const (
	probTooLong = "too long"
	probNUL     = "NUL"
)

// scanString reads the string starting at p.pos (which is '"') and returns
// its decoded value. prob is "" on success, probTooLong when it has more than
// max characters, probNUL when it holds U+0000, or a syntax description.
func (p *parser) scanString(max int) (s string, prob string) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: plain ASCII without escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			if p.pos-start > max {
				return "", probTooLong
			}
			s = string(p.data[start:p.pos])
			p.pos++
			return s, ""
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		p.pos++
	}
	b := append(p.buf[:0], p.data[start:p.pos]...)
	n := len(b)
	defer func() { p.buf = b[:0] }()
	for {
		if n > max {
			return "", probTooLong
		}
		if p.pos >= len(p.data) {
			return "", "unterminated string"
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(b), ""
		case c < 0x20:
			return "", "control character in string"
		case c == '\\':
			if b, prob = p.escape(b); prob != "" {
				return "", prob
			}
			n++
		case c < utf8.RuneSelf:
			b = append(b, c)
			p.pos++
			n++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", "invalid UTF-8 in string"
			}
			b = append(b, p.data[p.pos:p.pos+size]...)
			p.pos += size
			n++
		}
	}
}

// escape appends the character of the escape at p.pos (a backslash) to b;
// prob is as scanString's.
func (p *parser) escape(b []byte) (_ []byte, prob string) {
	if p.pos+1 >= len(p.data) {
		return b, "unterminated string"
	}
	e := p.data[p.pos+1]
	p.pos += 2
	switch e {
	case '"', '\\', '/':
		return append(b, e), ""
	case 'b':
		return append(b, '\b'), ""
	case 'f':
		return append(b, '\f'), ""
	case 'n':
		return append(b, '\n'), ""
	case 'r':
		return append(b, '\r'), ""
	case 't':
		return append(b, '\t'), ""
	case 'u':
		r, prob := p.unicodeEscape()
		if prob != "" {
			return b, prob
		}
		return utf8.AppendRune(b, r), ""
	}
	p.pos -= 2
	return b, "invalid escape in string"
}

// unicodeEscape reads the hex digits of a \u escape at p.pos, and the
// low half of a surrogate pair after a high one.
func (p *parser) unicodeEscape() (rune, string) {
	r, ok := p.hex4()
	if !ok {
		return 0, "invalid \\u escape"
	}
	if utf16.IsSurrogate(r) {
		if r >= 0xDC00 {
			return 0, "lone low surrogate in \\u escape"
		}
		if p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
			return 0, "lone high surrogate in \\u escape"
		}
		p.pos += 2
		r2, ok := p.hex4()
		if !ok {
			return 0, "invalid \\u escape"
		}
		if r2 < 0xDC00 || r2 > 0xDFFF {
			return 0, "invalid surrogate pair in \\u escape"
		}
		r = utf16.DecodeRune(r, r2)
	}
	if r == 0 {
		return 0, probNUL
	}
	return r, ""
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// str reads a string value of at most max characters.
func (p *parser) str(max int) (string, error) {
	if p.peek() != '"' {
		return "", p.wrongType("a string")
	}
	s, prob := p.scanString(max)
	switch prob {
	case "":
		return s, nil
	case probTooLong:
		return "", p.fail("is longer than %d characters", max)
	case probNUL:
		return "", p.fail("must not contain NUL characters")
	}
	return "", p.badString(prob)
}

// ident reads a string made of 1..max characters for which ok holds.
func (p *parser) ident(max int, ok func(byte) bool, pattern string) (string, error) {
	s, err := p.str(max)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", p.fail("must not be empty")
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return "", p.fail("must match %s", pattern)
		}
	}
	return s, nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isUUIDChar(c byte) bool { return isAlnum(c) || c == '-' }
func isWWNChar(c byte) bool  { return isAlnum(c) || c == '.' || c == ':' || c == '_' || c == '-' }
func isKeyChar(c byte) bool  { return isAlnum(c) || c == '.' || c == '_' || c == '-' }

const (
	uuidPattern = "^[A-Za-z0-9-]{1,128}$"
	wwnPattern  = "^[A-Za-z0-9.:_-]{1,128}$"
	keyPattern  = "^[A-Za-z0-9._-]{1,64}$"
	macPattern  = "^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$"
)

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func validMAC(s string) bool {
	if len(s) != 17 {
		return false
	}
	for i := 0; i < 17; i++ {
		if i%3 == 2 {
			if s[i] != ':' {
				return false
			}
		} else if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// integer reads a number that must be an integer in 0..max. Any JSON
// spelling of an integral value is accepted (3, 3.0, 3e0, 0.3e1); the check is
// exact on the decimal text, never through floating point.
func (p *parser) integer(max int64) (int64, error) {
	c := p.peek()
	if c != '-' && (c < '0' || c > '9') {
		return 0, p.wrongType("an integer")
	}
	n, err := p.scanNumber()
	if err != nil {
		return 0, err
	}
	v, prob := n.value()
	switch {
	case prob == numZero:
		return 0, nil // zero, however spelled (-0, 0.0e9)
	case prob == numFraction:
		return 0, p.fail("must be an integer")
	case prob == numHuge || n.neg || v > uint64(max):
		return 0, p.fail("must be between 0 and %d", max)
	}
	return int64(v), nil
}

// number is a JSON number as written: its sign, the digits before and
// after the point (sub-slices of the body) and the exponent.
type number struct {
	neg        bool
	whole, fra []byte
	exp        int64
}

// scanNumber reads a number token at p.pos, refusing what is not JSON.
func (p *parser) scanNumber() (number, error) {
	d := p.data
	i := p.pos
	var n number
	if d[i] == '-' {
		n.neg = true
		i++
	}
	start := i
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digitsEnd(d, i)
	default:
		p.pos = i
		return n, p.syntax("expected a digit")
	}
	n.whole = d[start:i]
	if i < len(d) && d[i] == '.' {
		start = i + 1
		if i = digitsEnd(d, start); i == start {
			p.pos = i
			return n, p.syntax("expected a digit after '.'")
		}
		n.fra = d[start:i]
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		var ok bool
		if i, n.exp, ok = exponent(d, i+1); !ok {
			p.pos = i
			return n, p.syntax("expected a digit in the exponent")
		}
	}
	p.pos = i
	return n, nil
}

// digitsEnd is the index after the decimal digits starting at i.
func digitsEnd(d []byte, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

// exponent reads an exponent's optional sign and digits starting at i
// (after the 'e'); ok is false when there is no digit.
func exponent(d []byte, i int) (end int, exp int64, ok bool) {
	neg := false
	if i < len(d) && (d[i] == '+' || d[i] == '-') {
		neg = d[i] == '-'
		i++
	}
	start := i
	for ; i < len(d) && d[i] >= '0' && d[i] <= '9'; i++ {
		if exp < 1<<40 { // saturate: far beyond any input length
			exp = exp*10 + int64(d[i]-'0')
		}
	}
	if neg {
		exp = -exp
	}
	return i, exp, i > start
}

// What a number's value is besides a non-negative integer (value).
const (
	numOK       = iota
	numZero     // zero, however spelled
	numFraction // not integral
	numHuge     // at least 10^17: beyond every limit
)

// value is the number's magnitude when it is an integer below 10^17
// (sign aside): digits(whole ++ fra) * 10^(exp - len(fra)).
func (n number) value() (uint64, int) {
	digit := func(k int) byte { // k indexes whole ++ fra
		if k < len(n.whole) {
			return n.whole[k]
		}
		return n.fra[k-len(n.whole)]
	}
	total := len(n.whole) + len(n.fra)
	first, last := -1, -1
	for k := 0; k < total; k++ {
		if digit(k) != '0' {
			if first < 0 {
				first = k
			}
			last = k
		}
	}
	if first < 0 {
		return 0, numZero
	}
	scale := n.exp - int64(len(n.fra)) + int64(total-1-last)
	if scale < 0 {
		return 0, numFraction
	}
	if int64(last-first+1)+scale > 17 {
		return 0, numHuge
	}
	var v uint64
	for k := first; k <= last; k++ {
		v = v*10 + uint64(digit(k)-'0')
	}
	for ; scale > 0; scale-- {
		v *= 10
	}
	return v, numOK
}

func (p *parser) intField(max int) (*int, error) {
	n, err := p.integer(int64(max))
	if err != nil {
		return nil, err
	}
	v := int(n)
	return &v, nil
}

func (p *parser) int64Field(max int64) (*int64, error) {
	n, err := p.integer(max)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// ---------------------------------------------------------------------------
// The schema.

func (p *parser) sections() (*Sections, error) {
	s := &Sections{}
	if p.atEnd() {
		return nil, p.fail("must be a JSON object")
	}
	if p.peek() != '{' {
		return nil, p.wrongType("a JSON object")
	}
	var st objState
	if err := p.openObject(&st); err != nil {
		return nil, err
	}
	for {
		key, ok, err := p.field(&st)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		switch key {
		case "system":
			s.System = &System{}
			err = p.system(s.System)
		case "cpu":
			s.CPU = &CPU{}
			err = p.cpu(s.CPU)
		case "memory":
			s.Memory = &Memory{}
			err = p.memory(s.Memory)
		case "gpus":
			s.GPUs, err = p.gpus()
		case "disks":
			s.Disks, err = p.disks()
		case "nics":
			s.NICs, err = p.nics()
		case "drivers":
			s.Drivers, err = p.stringMap()
		case "firmware":
			s.Firmware, err = p.stringMap()
		case "os":
			s.OS = &OS{}
			err = p.os(s.OS)
		default:
			err = p.unknown("section (system, cpu, memory, gpus, disks, nics, drivers, firmware, os)")
		}
		if err != nil {
			return nil, err
		}
	}
	if !p.atEnd() {
		return nil, p.syntax("expected the end of the sections object")
	}
	return s, nil
}

func (p *parser) system(v *System) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	for {
		key, ok, err := p.field(&st)
		if err != nil || !ok {
			return err
		}
		switch key {
		case "vendor":
			v.Vendor, err = p.str(MaxString)
		case "product":
			v.Product, err = p.str(MaxString)
		case "serial":
			v.Serial, err = p.str(MaxString)
		case "uuid":
			v.UUID, err = p.str(MaxString)
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
}

func (p *parser) cpu(v *CPU) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	for {
		key, ok, err := p.field(&st)
		if err != nil || !ok {
			return err
		}
		switch key {
		case "model":
			v.Model, err = p.str(MaxString)
		case "arch":
			v.Arch, err = p.str(MaxString)
		case "sockets":
			v.Sockets, err = p.intField(maxCount)
		case "cores":
			v.Cores, err = p.intField(maxCount)
		case "threads":
			v.Threads, err = p.intField(maxCount)
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
}

func (p *parser) memory(v *Memory) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	for {
		key, ok, err := p.field(&st)
		if err != nil || !ok {
			return err
		}
		switch key {
		case "totalBytes":
			v.TotalBytes, err = p.int64Field(maxBytes)
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
}

func (p *parser) os(v *OS) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	for {
		key, ok, err := p.field(&st)
		if err != nil || !ok {
			return err
		}
		switch key {
		case "name":
			v.Name, err = p.str(MaxString)
		case "version":
			v.Version, err = p.str(MaxString)
		case "kernel":
			v.Kernel, err = p.str(MaxString)
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
}

func (p *parser) gpus() ([]GPU, error) { return array(p, MaxGPUs, p.gpu) }

func (p *parser) gpu(i int, g *GPU) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	hasUUID := false
	for {
		key, ok, err := p.field(&st)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		switch key {
		case "uuid":
			g.UUID, err = p.ident(maxIDLen, isUUIDChar, uuidPattern)
			if err == nil {
				// One namespace with the MIG devices' UUIDs: a MIG
				// device reported earlier, in this GPU or another.
				if r, dup := p.migUUIDs[deviceKey(g.UUID)]; dup {
					err = p.fail("duplicates sections.gpus[%d].migDevices[%d].uuid %q", r.gpu, r.mig, g.UUID)
				} else {
					err = p.unique(&p.gpuUUIDs, deviceKey(g.UUID), "gpus", "uuid", g.UUID, i)
				}
				hasUUID = err == nil
			}
		case "index":
			g.Index, err = p.intField(maxIndex)
		case "model":
			g.Model, err = p.str(MaxString)
		case "memoryMiB":
			g.MemoryMiB, err = p.intField(maxMemoryMiB)
		case "pciBusId":
			g.PCIBusID, err = p.str(MaxString)
		case "migMode":
			g.MigMode, err = p.str(MaxString)
			if err == nil && g.MigMode != "enabled" && g.MigMode != "disabled" {
				err = p.fail("must be one of enabled, disabled")
			}
		case "migDevices":
			g.MigDevices, err = p.migDevices(i)
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
	if !hasUUID {
		p.push("uuid")
		return p.fail("is required")
	}
	return nil
}

func (p *parser) migDevices(gpu int) ([]MIGDevice, error) {
	return array(p, MaxMIGDevices, func(i int, m *MIGDevice) error { return p.migDevice(gpu, i, m) })
}

// array parses a JSON array of at most max objects, each with one.
func array[T any](p *parser, max int, one func(i int, v *T) error) ([]T, error) {
	var st arrState
	if err := p.openArray(&st, max); err != nil {
		return nil, err
	}
	out := []T{}
	for {
		i, ok, err := p.elem(&st)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, *new(T))
		if err := one(i, &out[i]); err != nil {
			return nil, err
		}
	}
}

// deviceKey is a device id as devices are told apart: GPU and MIG UUIDs,
// WWNs and MACs are hexadecimal or registered names that tools print in
// either case (nvidia-smi lower, some BMCs and lsblk upper), so one device
// reported in two cases is one device, in a report and between reports.
func deviceKey(id string) string { return strings.ToLower(id) }

// unique records that item i of list holds id, or fails naming the earlier
// item holding it.
func (p *parser) unique(seen *map[string]int, id, list, field, shown string, i int) error {
	if j, dup := (*seen)[id]; dup {
		return p.fail("duplicates sections.%s[%d].%s %q", list, j, field, shown)
	}
	if *seen == nil {
		*seen = make(map[string]int, 8)
	}
	(*seen)[id] = i
	return nil
}

func (p *parser) migDevice(gpu, i int, m *MIGDevice) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	hasUUID, hasProfile := false, false
	for {
		key, ok, err := p.field(&st)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		switch key {
		case "profile":
			m.Profile, err = p.str(MaxString)
			if err == nil && m.Profile == "" {
				err = p.fail("must not be empty")
			}
			hasProfile = true
		case "uuid":
			m.UUID, err = p.ident(maxIDLen, isUUIDChar, uuidPattern)
			if err == nil {
				if r, dup := p.migUUIDs[deviceKey(m.UUID)]; dup {
					err = p.fail("duplicates sections.gpus[%d].migDevices[%d].uuid %q", r.gpu, r.mig, m.UUID)
				} else if j, dup := p.gpuUUIDs[deviceKey(m.UUID)]; dup {
					err = p.fail("duplicates sections.gpus[%d].uuid %q", j, m.UUID)
				} else {
					if p.migUUIDs == nil {
						p.migUUIDs = make(map[string]migRef, 8)
					}
					p.migUUIDs[deviceKey(m.UUID)] = migRef{gpu, i}
					hasUUID = true
				}
			}
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
	if !hasProfile {
		p.push("profile")
		return p.fail("is required")
	}
	if !hasUUID {
		p.push("uuid")
		return p.fail("is required")
	}
	return nil
}

func (p *parser) disks() ([]Disk, error) { return array(p, MaxDisks, p.disk) }

func (p *parser) disk(i int, d *Disk) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	hasWWN := false
	for {
		key, ok, err := p.field(&st)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		switch key {
		case "wwn":
			d.WWN, err = p.ident(maxIDLen, isWWNChar, wwnPattern)
			if err == nil {
				err = p.unique(&p.wwns, deviceKey(d.WWN), "disks", "wwn", d.WWN, i)
				hasWWN = err == nil
			}
		case "serial":
			d.Serial, err = p.str(MaxString)
		case "model":
			d.Model, err = p.str(MaxString)
		case "sizeBytes":
			d.SizeBytes, err = p.int64Field(maxBytes)
		case "slot":
			d.Slot, err = p.str(MaxString)
			if err == nil && d.Slot != "" {
				err = p.unique(&p.slots, d.Slot, "disks", "slot", d.Slot, i)
			}
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
	if !hasWWN {
		p.push("wwn")
		return p.fail("is required")
	}
	return nil
}

func (p *parser) nics() ([]NIC, error) { return array(p, MaxNICs, p.nic) }

func (p *parser) nic(i int, n *NIC) error {
	var st objState
	if err := p.openObject(&st); err != nil {
		return err
	}
	hasMAC := false
	for {
		key, ok, err := p.field(&st)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		switch key {
		case "mac":
			n.MAC, err = p.str(MaxString)
			if err == nil && !validMAC(n.MAC) {
				err = p.fail("must match %s", macPattern)
			}
			if err == nil {
				err = p.unique(&p.macs, deviceKey(n.MAC), "nics", "mac", n.MAC, i)
				hasMAC = err == nil
			}
		case "name":
			n.Name, err = p.str(MaxString)
		case "speedMbps":
			n.SpeedMbps, err = p.int64Field(maxSpeedMbps)
		default:
			err = p.unknown("field")
		}
		if err != nil {
			return err
		}
	}
	if !hasMAC {
		p.push("mac")
		return p.fail("is required")
	}
	return nil
}

// stringMap reads drivers or firmware: at most MaxMapEntries entries, keys
// matching keyPattern, string values.
func (p *parser) stringMap() (map[string]string, error) {
	var st objState
	if err := p.openObject(&st); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for {
		key, ok, err := p.field(&st)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		if len(out) >= MaxMapEntries {
			p.pop()
			return nil, p.fail("has more than %d entries", MaxMapEntries)
		}
		if len(key) == 0 || len(key) > maxMapKeyLen {
			return nil, p.fail("has a key that does not match %s", keyPattern)
		}
		for i := 0; i < len(key); i++ {
			if !isKeyChar(key[i]) {
				return nil, p.fail("has a key that does not match %s", keyPattern)
			}
		}
		v, err := p.str(MaxString)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
}
