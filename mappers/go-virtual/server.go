package main

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	dmi "verge.invalid/mappers/go-virtual/dmi/v1beta1"
)

// service is DeviceMapperService over the mapper, as edgecore calls it.
type service struct {
	dmi.UnimplementedDeviceMapperServiceServer
	m *mapper
}

func (s *service) RegisterDevice(_ context.Context, req *dmi.RegisterDeviceRequest) (*dmi.RegisterDeviceResponse, error) {
	d := req.GetDevice()
	if d.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "RegisterDevice: device with a name is required")
	}
	slog.Info("RegisterDevice", "namespace", d.GetNamespace(), "device", d.GetName())
	s.m.putDevice(d)
	return &dmi.RegisterDeviceResponse{DeviceName: d.GetName(), DeviceNamespace: d.GetNamespace()}, nil
}

func (s *service) UpdateDevice(_ context.Context, req *dmi.UpdateDeviceRequest) (*dmi.UpdateDeviceResponse, error) {
	d := req.GetDevice()
	if d.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "UpdateDevice: device with a name is required")
	}
	slog.Info("UpdateDevice", "namespace", d.GetNamespace(), "device", d.GetName())
	s.m.putDevice(d)
	return &dmi.UpdateDeviceResponse{}, nil
}

func (s *service) RemoveDevice(_ context.Context, req *dmi.RemoveDeviceRequest) (*dmi.RemoveDeviceResponse, error) {
	if req.GetDeviceName() == "" {
		return nil, status.Error(codes.InvalidArgument, "RemoveDevice: a device name is required")
	}
	slog.Info("RemoveDevice", "namespace", req.GetDeviceNamespace(), "device", req.GetDeviceName())
	s.m.removeDevice(req.GetDeviceNamespace(), req.GetDeviceName())
	return &dmi.RemoveDeviceResponse{}, nil
}

func (s *service) CreateDeviceModel(_ context.Context, req *dmi.CreateDeviceModelRequest) (*dmi.CreateDeviceModelResponse, error) {
	model := req.GetModel()
	if model.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "CreateDeviceModel: model with a name is required")
	}
	slog.Info("CreateDeviceModel", "namespace", model.GetNamespace(), "model", model.GetName())
	s.m.putModel(model)
	return &dmi.CreateDeviceModelResponse{DeviceModelName: model.GetName(), DeviceModelNamespace: model.GetNamespace()}, nil
}

func (s *service) UpdateDeviceModel(_ context.Context, req *dmi.UpdateDeviceModelRequest) (*dmi.UpdateDeviceModelResponse, error) {
	model := req.GetModel()
	if model.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "UpdateDeviceModel: model with a name is required")
	}
	slog.Info("UpdateDeviceModel", "namespace", model.GetNamespace(), "model", model.GetName())
	s.m.putModel(model)
	return &dmi.UpdateDeviceModelResponse{}, nil
}

func (s *service) RemoveDeviceModel(_ context.Context, req *dmi.RemoveDeviceModelRequest) (*dmi.RemoveDeviceModelResponse, error) {
	if req.GetModelName() == "" {
		return nil, status.Error(codes.InvalidArgument, "RemoveDeviceModel: a model name is required")
	}
	slog.Info("RemoveDeviceModel", "namespace", req.GetModelNamespace(), "model", req.GetModelName())
	s.m.removeModel(req.GetModelNamespace(), req.GetModelName())
	return &dmi.RemoveDeviceModelResponse{}, nil
}

func (s *service) GetDevice(_ context.Context, req *dmi.GetDeviceRequest) (*dmi.GetDeviceResponse, error) {
	if req.GetDeviceName() == "" {
		return nil, status.Error(codes.InvalidArgument, "GetDevice: a device name is required")
	}
	d, ok := s.m.getDevice(req.GetDeviceNamespace(), req.GetDeviceName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "device %s/%s is not registered", req.GetDeviceNamespace(), req.GetDeviceName())
	}
	return &dmi.GetDeviceResponse{Device: d}, nil
}
