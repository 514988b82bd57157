package kafka

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
)

// scramMechanism is a SCRAM-SHA-256/512 client (RFC 5802, RFC 7677) for
// kafka-go's sasl.Mechanism. kafka-go's own sasl/scram package needs
// github.com/xdg-go/scram, which is not a dependency of this module; this
// implementation uses only the standard library. Usernames and passwords are
// used as given (no SASLprep normalization), which is exact for ASCII.
type scramMechanism struct {
	name     string
	hash     func() hash.Hash
	username string
	password string
}

func newScram(mechanism, username, password string) (*scramMechanism, error) {
	switch mechanism {
	case SASLScramSHA256:
		return &scramMechanism{mechanism, sha256.New, username, password}, nil
	case SASLScramSHA512:
		return &scramMechanism{mechanism, sha512.New, username, password}, nil
	}
	return nil, fmt.Errorf("kafka: unsupported SCRAM mechanism %q", mechanism)
}

func (m *scramMechanism) Name() string { return m.name }

func (m *scramMechanism) Start(context.Context) (sasl.StateMachine, []byte, error) {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, nil, fmt.Errorf("scram: nonce: %w", err)
	}
	nonce := base64.RawStdEncoding.EncodeToString(raw[:])
	user := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(m.username)
	s := &scramSession{m: m, nonce: nonce, clientFirstBare: "n=" + user + ",r=" + nonce}
	return s, []byte("n,," + s.clientFirstBare), nil
}

type scramSession struct {
	m               *scramMechanism
	nonce           string
	clientFirstBare string
	step            int
	serverSignature []byte
}

func (s *scramSession) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	s.step++
	switch s.step {
	case 1:
		return s.clientFinal(string(challenge))
	case 2:
		return s.verifyServerFinal(string(challenge))
	}
	return false, nil, errors.New("scram: unexpected challenge")
}

func scramAttrs(msg string) map[byte]string {
	attrs := make(map[byte]string)
	for _, kv := range strings.Split(msg, ",") {
		if len(kv) >= 2 && kv[1] == '=' {
			attrs[kv[0]] = kv[2:]
		}
	}
	return attrs
}

func (s *scramSession) clientFinal(serverFirst string) (bool, []byte, error) {
	a := scramAttrs(serverFirst)
	if e, ok := a['e']; ok {
		return false, nil, fmt.Errorf("scram: server error: %s", e)
	}
	if _, ok := a['m']; ok {
		return false, nil, errors.New("scram: unsupported mandatory extension")
	}
	nonce := a['r']
	if !strings.HasPrefix(nonce, s.nonce) || len(nonce) == len(s.nonce) {
		return false, nil, errors.New("scram: bad server nonce")
	}
	salt, err := base64.StdEncoding.DecodeString(a['s'])
	if err != nil || len(salt) == 0 {
		return false, nil, errors.New("scram: bad salt")
	}
	iter, err := strconv.Atoi(a['i'])
	if err != nil || iter < 1 {
		return false, nil, errors.New("scram: bad iteration count")
	}

	h := s.m.hash
	salted, err := pbkdf2.Key(h, s.m.password, salt, iter, h().Size())
	if err != nil {
		return false, nil, fmt.Errorf("scram: %w", err)
	}
	clientKey := hmacSum(h, salted, "Client Key")
	storedKey := h()
	storedKey.Write(clientKey)
	withoutProof := "c=biws,r=" + nonce // biws = base64("n,,")
	authMessage := s.clientFirstBare + "," + serverFirst + "," + withoutProof
	clientSig := hmacSum(h, storedKey.Sum(nil), authMessage)
	proof := make([]byte, len(clientKey))
	for i := range proof {
		proof[i] = clientKey[i] ^ clientSig[i]
	}
	s.serverSignature = hmacSum(h, hmacSum(h, salted, "Server Key"), authMessage)
	final := withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)
	return false, []byte(final), nil
}

func (s *scramSession) verifyServerFinal(serverFinal string) (bool, []byte, error) {
	a := scramAttrs(serverFinal)
	if e, ok := a['e']; ok {
		return false, nil, fmt.Errorf("scram: server error: %s", e)
	}
	v, err := base64.StdEncoding.DecodeString(a['v'])
	if err != nil || !bytes.Equal(v, s.serverSignature) {
		return false, nil, errors.New("scram: server signature mismatch")
	}
	return true, nil, nil
}

func hmacSum(h func() hash.Hash, key []byte, msg string) []byte {
	mac := hmac.New(h, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}
