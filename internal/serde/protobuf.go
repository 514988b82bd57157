package serde

import (
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protobufCodec encodes an event's JSON payload (protobuf's JSON mapping,
// strict: an unknown field is a fault) as a message of a .proto schema
// compiled with bufbuild/protocompile, writing the Confluent message
// indexes of the message before its binary form. The message is the one
// named by the event's record name (its full or its short name), else the
// schema's only top-level message.
type protobufCodec struct {
	file protoreflect.FileDescriptor
	// types resolves the message types an Any names: the schema's own,
	// its references', then the well-known ones.
	types protoResolver
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
	return &protobufCodec{file: fd, types: protoResolver{linker.ResolverFromFile(fd), protoregistry.GlobalTypes}}, nil
}

// protoResolver finds a type in the first resolver that has it.
type protoResolver []interface {
	protoregistry.MessageTypeResolver
	protoregistry.ExtensionTypeResolver
}

func (r protoResolver) FindMessageByName(n protoreflect.FullName) (protoreflect.MessageType, error) {
	return first(r, func(x protoregistry.MessageTypeResolver) (protoreflect.MessageType, error) {
		return x.FindMessageByName(n)
	})
}

func (r protoResolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	return first(r, func(x protoregistry.MessageTypeResolver) (protoreflect.MessageType, error) {
		return x.FindMessageByURL(url)
	})
}

func (r protoResolver) FindExtensionByName(n protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return firstExt(r, func(x protoregistry.ExtensionTypeResolver) (protoreflect.ExtensionType, error) {
		return x.FindExtensionByName(n)
	})
}

func (r protoResolver) FindExtensionByNumber(m protoreflect.FullName, n protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return firstExt(r, func(x protoregistry.ExtensionTypeResolver) (protoreflect.ExtensionType, error) {
		return x.FindExtensionByNumber(m, n)
	})
}

func first(r protoResolver, find func(protoregistry.MessageTypeResolver) (protoreflect.MessageType, error)) (protoreflect.MessageType, error) {
	err := error(protoregistry.NotFound)
	for _, x := range r {
		var t protoreflect.MessageType
		if t, err = find(x); err == nil {
			return t, nil
		}
	}
	return nil, err
}

func firstExt(r protoResolver, find func(protoregistry.ExtensionTypeResolver) (protoreflect.ExtensionType, error)) (protoreflect.ExtensionType, error) {
	err := error(protoregistry.NotFound)
	for _, x := range r {
		var t protoreflect.ExtensionType
		if t, err = find(x); err == nil {
			return t, nil
		}
	}
	return nil, err
}

// message returns the message named record (full or short name) and its
// indexes from the file's top level; with no such message, the file's
// only top-level message. With several and none named, it fails: the
// event would be published as whichever message it happens to fit.
func (c *protobufCodec) message(record string) (protoreflect.MessageDescriptor, []int, error) {
	if record != "" {
		if md, index := findMessage(c.file.Messages(), record, nil); md != nil {
			return md, index, nil
		}
	}
	msgs := c.file.Messages()
	if msgs.Len() == 1 {
		return msgs.Get(0), []int{0}, nil
	}
	names := make([]string, msgs.Len())
	for i := range names {
		names[i] = string(msgs.Get(i).FullName())
	}
	return nil, nil, &fieldError{msg: fmt.Sprintf("the record name %q names none of the schema's messages (%s): set the event's type, or the header --subject-record-header names, to one of them", record, strings.Join(names, ", "))}
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
	md, index, err := c.message(record)
	if err != nil {
		return nil, err
	}
	msg := dynamicpb.NewMessage(md)
	if err := (protojson.UnmarshalOptions{Resolver: c.types}).Unmarshal(payload, msg); err != nil {
		// protojson's "(line 1:26)" counts in the payload as stored, not
		// as the writer wrote it: left out.
		msg := protoPosition.ReplaceAllString(strings.TrimPrefix(err.Error(), "proto: "), "")
		return nil, &fieldError{msg: fmt.Sprintf("message %s: %s", md.FullName(), msg)}
	}
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(appendIndexes(dst, index), msg)
}

var protoPosition = regexp.MustCompile(`\(line \d+:\d+\): `)

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
