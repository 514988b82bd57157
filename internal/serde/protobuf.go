package serde

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protobufCodec encodes an event's JSON payload (protobuf's JSON mapping,
// strict: an unknown field is a fault) as a message of a .proto schema
// compiled with bufbuild/protocompile, writing the Confluent message
// indexes of the message before its binary form. The message is the one
// named by the event's record name (its full or its short name), else the
// schema's first.
type protobufCodec struct {
	file protoreflect.FileDescriptor
}

// protoFile is the name the schema is compiled under.
const protoFile = "pgoutbox_schema.proto"

// newProtobufCodec compiles text with refs (import path to schema text) and
// the well-known types; nothing is read from the disk.
func newProtobufCodec(text string, refs map[string]string) (*protobufCodec, error) {
	srcs := map[string]string{protoFile: text}
	for name, ref := range refs {
		srcs[name] = ref
	}
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(srcs),
	})}
	files, err := c.Compile(context.Background(), protoFile)
	if err != nil {
		return nil, err
	}
	fd := files[0]
	if fd.Messages().Len() == 0 {
		return nil, fmt.Errorf("the schema declares no message")
	}
	return &protobufCodec{file: fd}, nil
}

// message returns the message named record (full or short name) and its
// indexes from the file's top level, else the first message.
func (c *protobufCodec) message(record string) (protoreflect.MessageDescriptor, []int) {
	if record != "" {
		if md, index := findMessage(c.file.Messages(), record, nil); md != nil {
			return md, index
		}
	}
	return c.file.Messages().Get(0), []int{0}
}

func findMessage(msgs protoreflect.MessageDescriptors, record string, path []int) (protoreflect.MessageDescriptor, []int) {
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		index := append(append([]int(nil), path...), i)
		if string(md.FullName()) == record || string(md.Name()) == record {
			return md, index
		}
		if found, at := findMessage(md.Messages(), record, index); found != nil {
			return found, at
		}
	}
	return nil, nil
}

func (c *protobufCodec) encode(dst, payload []byte, record string) ([]byte, error) {
	md, index := c.message(record)
	msg := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal(payload, msg); err != nil {
		return nil, &fieldError{msg: fmt.Sprintf("message %s: %s", md.FullName(), strings.TrimPrefix(err.Error(), "proto: "))}
	}
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(appendIndexes(dst, index), msg)
}

// appendIndexes appends a message's indexes as Confluent frames them:
// zig-zag varints, their count first, and [0] (the first message) as a
// single 0.
func appendIndexes(b []byte, index []int) []byte {
	if len(index) == 1 && index[0] == 0 {
		return append(b, 0)
	}
	b = binary.AppendVarint(b, int64(len(index)))
	for _, i := range index {
		b = binary.AppendVarint(b, int64(i))
	}
	return b
}
