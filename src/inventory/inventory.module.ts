import { Module } from '@nestjs/common';
import { InventoryService } from './inventory.service';
import { ProductCatalogService } from './product-catalog.service';
import { StockHintsService } from './stock-hints.service';
import { StockRepository } from './stock.repository';

@Module({
  providers: [InventoryService, ProductCatalogService, StockHintsService, StockRepository],
  exports: [InventoryService, ProductCatalogService, StockHintsService, StockRepository],
})
export class InventoryModule {}
