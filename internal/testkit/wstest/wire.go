package wstest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// ReadWireFrame reads one WebSocket frame (RFC 6455 §5.2) from a raw
// connection and returns its bytes as they travelled and its payload,
// unmasked. Test proxies use it to see frames while forwarding them
// unchanged. Frames over 1 MiB are refused.
func ReadWireFrame(r *bufio.Reader) (raw, payload []byte, err error) {
	head := make([]byte, 2, 14)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, nil, err
	}
	masked := head[1]&0x80 != 0
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126:
		ext := make([]byte, 2)
		if _, err := io.ReadFull(r, ext); err != nil {
			return nil, nil, err
		}
		head = append(head, ext...)
		n = uint64(binary.BigEndian.Uint16(ext))
	case 127:
		ext := make([]byte, 8)
		if _, err := io.ReadFull(r, ext); err != nil {
			return nil, nil, err
		}
		head = append(head, ext...)
		n = binary.BigEndian.Uint64(ext)
	}
	if n > 1<<20 {
		return nil, nil, errors.New("wstest: frame too large")
	}
	var key []byte
	if masked {
		key = make([]byte, 4)
		if _, err := io.ReadFull(r, key); err != nil {
			return nil, nil, err
		}
		head = append(head, key...)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, nil, err
	}
	raw = append(head, body...)
	payload = body
	if masked {
		payload = make([]byte, n)
		for i := range body {
			payload[i] = body[i] ^ key[i%4]
		}
	}
	return raw, payload, nil
}
