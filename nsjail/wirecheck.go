package nsjail

/*
#include <stdlib.h>
#include "hutch_init.h"
int hutch_wirecheck_setup(const unsigned char *b, size_t n, char *out, size_t len);
int hutch_wirecheck_spawn(const unsigned char *b, size_t n, const unsigned char *payload, size_t plen, char *out, size_t len);
size_t hutch_wirecheck_sample(uint32_t op, unsigned char *buf, size_t len);
int hutch_wirecheck_socket(const unsigned char *b, size_t n, char *out, size_t len);
*/
import "C"

import (
	"errors"
	"unsafe"
)

// The Go side of the wire check (wirecheck.c, wire_test.go): init.c's own
// parsers and encoders, reached from Go.

// cDescribe runs init.c's parser of a setup (payload nil) or of a spawn
// request and its payload on b, and returns its description.
func cDescribe(b, payload []byte) (string, error) {
	out := make([]byte, 1<<20)
	in := C.CBytes(b)
	defer C.free(in)
	var rc C.int
	if payload == nil {
		rc = C.hutch_wirecheck_setup((*C.uchar)(in), C.size_t(len(b)), (*C.char)(unsafe.Pointer(&out[0])), C.size_t(len(out)))
	} else {
		pl := C.CBytes(payload)
		defer C.free(pl)
		rc = C.hutch_wirecheck_spawn((*C.uchar)(in), C.size_t(len(b)), (*C.uchar)(pl), C.size_t(len(payload)), (*C.char)(unsafe.Pointer(&out[0])), C.size_t(len(out)))
	}
	s := C.GoString((*C.char)(unsafe.Pointer(&out[0])))
	if rc != 0 {
		return "", errors.New(s)
	}
	return s, nil
}

// cDescribeSocket runs init.c's parser of a socket request on b and
// returns its description.
func cDescribeSocket(b []byte) (string, error) {
	out := make([]byte, 4096)
	in := C.CBytes(b)
	defer C.free(in)
	rc := C.hutch_wirecheck_socket((*C.uchar)(in), C.size_t(len(b)), (*C.char)(unsafe.Pointer(&out[0])), C.size_t(len(out)))
	s := C.GoString((*C.char)(unsafe.Pointer(&out[0])))
	if rc != 0 {
		return "", errors.New(s)
	}
	return s, nil
}

// cSample is a message of op as init.c's encoders make it.
func cSample(op uint32) []byte {
	buf := make([]byte, 1<<16)
	n := C.hutch_wirecheck_sample(C.uint32_t(op), (*C.uchar)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return buf[:n]
}
