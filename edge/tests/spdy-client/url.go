package main

import "net/url"

type urlType = url.URL

func parseURL(raw string) (*url.URL, error) { return url.Parse(raw) }
