package test

import (
	"archive/zip"
	"io"
)

type zipWriter struct{ w *zip.Writer }

func newZip(w io.Writer) *zipWriter { return &zipWriter{zip.NewWriter(w)} }

func (z *zipWriter) add(name, body string) {
	f, _ := z.w.Create(name)
	f.Write([]byte(body))
}

func (z *zipWriter) close() { z.w.Close() }
