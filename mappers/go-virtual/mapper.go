package main

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	dmi "verge.invalid/mappers/go-virtual/dmi/v1beta1"
)

// mapper holds the models and devices, keyed "<namespace>/<name>", and one reporting
// goroutine per device.
type mapper struct {
	ctx     context.Context
	client  dmi.DeviceManagerServiceClient
	mu      sync.Mutex
	models  map[string]*dmi.DeviceModel
	devices map[string]*running
	wg      sync.WaitGroup
}

// running is a device and the cancel function of its reporting goroutine.
type running struct {
	mu      sync.Mutex
	device  *dmi.Device
	counter int64
	cancel  context.CancelFunc
}

func newMapper(ctx context.Context, client dmi.DeviceManagerServiceClient) *mapper {
	return &mapper{ctx: ctx, client: client, models: map[string]*dmi.DeviceModel{}, devices: map[string]*running{}}
}

func key(namespace, name string) string { return namespace + "/" + name }

func (m *mapper) putModel(model *dmi.DeviceModel) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.models[key(model.GetNamespace(), model.GetName())] = model
	slog.Info("device model stored", "namespace", model.GetNamespace(), "model", model.GetName())
}

func (m *mapper) removeModel(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.models, key(namespace, name))
	slog.Info("device model removed", "namespace", namespace, "model", name)
}

// putDevice starts reporting a device, or restarts it with its new description (new desired
// values are reported at once).
func (m *mapper) putDevice(device *dmi.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(device.GetNamespace(), device.GetName())
	if old, ok := m.devices[k]; ok {
		old.cancel()
	}
	ctx, cancel := context.WithCancel(m.ctx)
	r := &running{device: device, cancel: cancel}
	m.devices[k] = r
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.report(ctx, r)
	}()
	slog.Info("device registered", "namespace", device.GetNamespace(), "device", device.GetName(),
		"model", device.GetSpec().GetDeviceModelReference(), "properties", len(device.GetSpec().GetProperties()))
}

func (m *mapper) removeDevice(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.devices[key(namespace, name)]; ok {
		r.cancel()
		delete(m.devices, key(namespace, name))
	}
	slog.Info("device removed", "namespace", namespace, "device", name)
}

func (m *mapper) getDevice(namespace, name string) (*dmi.Device, bool) {
	m.mu.Lock()
	r, ok := m.devices[key(namespace, name)]
	m.mu.Unlock()
	if !ok {
		return nil, false
	}
	return &dmi.Device{Name: name, Namespace: namespace, Status: &dmi.DeviceStatus{Twins: r.twins()}}, true
}

func (m *mapper) stopAll() {
	m.mu.Lock()
	for _, r := range m.devices {
		r.cancel()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// twins is one twin per property: reported is the desired value when set, else the counter.
func (r *running) twins() []*dmi.Twin {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counter++
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var twins []*dmi.Twin
	for _, p := range r.device.GetSpec().GetProperties() {
		desired := p.GetDesired().GetValue()
		value := desired
		if value == "" {
			value = strconv.FormatInt(r.counter, 10)
		}
		kind := p.GetDesired().GetMetadata()["type"]
		if kind == "" && desired == "" {
			kind = "int"
		} else if kind == "" {
			kind = "string"
		}
		twins = append(twins, &dmi.Twin{
			PropertyName:    p.GetName(),
			Reported:        &dmi.TwinProperty{Value: value, Metadata: map[string]string{"timestamp": now, "type": kind}},
			ObservedDesired: &dmi.TwinProperty{Value: desired, Metadata: map[string]string{"type": kind}},
		})
	}
	return twins
}

// report sends every property's twin every reportCycle (the smallest of the device's
// properties) and the state "online" every status.reportCycle, until ctx ends. The first
// report goes out at once.
func (m *mapper) report(ctx context.Context, r *running) {
	device := r.device
	every := time.Duration(0)
	for _, p := range device.GetSpec().GetProperties() {
		if c := cycle(p.GetReportCycle()); every == 0 || c < every {
			every = c
		}
	}
	if every == 0 {
		every = time.Second
	}
	twinTick := time.NewTicker(every)
	defer twinTick.Stop()
	stateTick := time.NewTicker(cycle(device.GetStatus().GetReportCycle()))
	defer stateTick.Stop()
	m.sendTwins(ctx, r)
	m.sendState(ctx, device)
	for {
		select {
		case <-ctx.Done():
			return
		case <-twinTick.C:
			m.sendTwins(ctx, r)
		case <-stateTick.C:
			m.sendState(ctx, device)
		}
	}
}

func (m *mapper) sendTwins(ctx context.Context, r *running) {
	twins := r.twins()
	if len(twins) == 0 {
		return
	}
	d := r.device
	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := m.client.ReportDeviceStatus(callCtx, &dmi.ReportDeviceStatusRequest{
		DeviceName: d.GetName(), DeviceNamespace: d.GetNamespace(),
		ReportedDevice: &dmi.DeviceStatus{Twins: twins, ReportToCloud: d.GetStatus().GetReportToCloud(), ReportCycle: d.GetStatus().GetReportCycle()},
	})
	for _, t := range twins {
		slog.Debug("reported twin", "device", d.GetName(), "property", t.GetPropertyName(),
			"reported", t.GetReported().GetValue(), "observedDesired", t.GetObservedDesired().GetValue())
	}
	if err != nil && ctx.Err() == nil {
		slog.Warn("ReportDeviceStatus failed", "namespace", d.GetNamespace(), "device", d.GetName(), "error", err)
	}
}

func (m *mapper) sendState(ctx context.Context, d *dmi.Device) {
	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := m.client.ReportDeviceStates(callCtx, &dmi.ReportDeviceStatesRequest{
		DeviceName: d.GetName(), DeviceNamespace: d.GetNamespace(), State: "online",
	})
	if err != nil && ctx.Err() == nil {
		slog.Warn("ReportDeviceStates failed", "namespace", d.GetNamespace(), "device", d.GetName(), "error", err)
	}
}
